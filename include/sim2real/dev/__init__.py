"""Development tools: the local AWS sandbox, the demo, benchmarks, fault replay, the UI stack and
the SageMaker-SDK build of the GR00T pipeline template. Never shipped to MWAA, an image or a robot;
may import every other package.
"""
