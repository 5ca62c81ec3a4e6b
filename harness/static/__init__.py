"""The static checks: what a candidate's Python and kernel sources may say, and what its built
objects may call, read before any of it runs."""
