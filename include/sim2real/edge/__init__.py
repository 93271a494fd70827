"""What runs on the robot in the Greengrass components: the GR00T-protocol policy server, its
codec, the setup component, the device check and the benchmark.

May import :mod:`sim2real.contract`, never the orchestration, workloads or dev packages.
"""
