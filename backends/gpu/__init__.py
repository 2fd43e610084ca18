"""What the CUDA, ROCm and OpenCL backends share: rKernels in the kernel IR (``kernels.py``).

Not a backend itself (it registers nothing): ``rammer.codegen`` renders these
kernels in each backend's dialect.
"""
