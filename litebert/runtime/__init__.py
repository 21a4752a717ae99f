"""How this machine runs the math: the CPU's abilities, the fp32 GEMM backend, precisions, devices and the
allocator. Used by the model core (gemm), training and serving alike."""
