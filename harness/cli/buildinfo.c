/* buildinfo.c - the build's description, from the macros it was compiled with. See buildinfo.h. */
#include "cli/buildinfo.h"

#ifndef OOM_DEBUG
#define OOM_DEBUG 0
#endif

#if defined(__SANITIZE_ADDRESS__)
#define BUILDINFO_SAN ", sanitizers"
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BUILDINFO_SAN ", sanitizers"
#endif
#endif
#ifndef BUILDINFO_SAN
#define BUILDINFO_SAN ""
#endif

#ifdef __OPTIMIZE__
#define BUILDINFO_OPT ""
#else
#define BUILDINFO_OPT ", not optimised"
#endif

#define BUILDINFO_STR2(x) #x
#define BUILDINFO_STR(x) BUILDINFO_STR2(x)

const char *buildinfo_describe(void)
{
#if OOM_DEBUG >= 2
    return "checked build (OOM_DEBUG=" BUILDINFO_STR(OOM_DEBUG) ": the allocator validator runs after every "
                                                                 "call" BUILDINFO_OPT BUILDINFO_SAN ")";
#elif OOM_DEBUG == 0 && defined(__OPTIMIZE__)
    return "optimised build (OOM_DEBUG=0" BUILDINFO_SAN ")";
#else
    return "build with OOM_DEBUG=" BUILDINFO_STR(OOM_DEBUG) BUILDINFO_OPT BUILDINFO_SAN;
#endif
}
