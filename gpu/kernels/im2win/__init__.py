"""im2win device code: the window transform and the convolution kernels (Alg. 2 and 3), each with a NumPy oracle."""
