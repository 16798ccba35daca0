"""Op libraries: one pure JAX function per source op, the vocabulary every backend shares."""
