"""Responders: threads that play what AWS would do for the calls moto only records."""
