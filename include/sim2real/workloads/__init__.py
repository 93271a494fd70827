"""What the training images and the evaluation workstation run: the RL trainer and its launcher
hooks, the closed-loop evaluator, ONNX export, checkpoint publishing and the GR00T step scripts.

May import :mod:`sim2real.contract`, never the orchestration, edge or dev packages.
"""
