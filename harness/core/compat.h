/* compat.h - C/CUDA-C linkage guards shared by every header that a .cu file includes. */
#ifndef OOMLAB_COMPAT_H
#define OOMLAB_COMPAT_H
#ifdef __cplusplus
#define OOM_BEGIN_DECLS extern "C" {
#define OOM_END_DECLS }
#else
#define OOM_BEGIN_DECLS
#define OOM_END_DECLS
#endif
#endif
