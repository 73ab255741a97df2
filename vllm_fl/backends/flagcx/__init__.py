"""FlagCX collectives backend: FlagOpen's cross-chip communication library (``libflagcx.so``,
C API ``flagcx.h``), loaded with ctypes from the directory ``FLAGCX_PATH`` names.

``library`` binds the C functions; ``capi`` declares the C types and signatures they use.
``scripts/build_flagcx.sh`` builds the library from FlagCX's source into that directory."""
