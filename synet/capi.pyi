# synet.capi has no Python-level API: it is the public Cython API (synet/capi.pxd)
