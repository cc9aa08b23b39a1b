"""The infinite-width limit: the NNGP and NTK layer maps, their diagonal windows and the Gauss–Hermite and Gauss–Legendre quadratures."""
