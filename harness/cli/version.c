/* version.c - `oomlab version`: the version, whether the cuda backend is built in, which build it is: optimised
 * (what users run) or checked (what the suite runs), and the commit it was built from. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/command.h"
#include "cli/version.h"
#include "device/device.h"

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

/* One phrase naming the build, from the flags it was compiled with: "optimised build (OOM_DEBUG=0)" for `make`,
 * "checked build (OOM_DEBUG=2: the allocator validator runs after every call)" for `make test`, with
 * ", not optimised" and ", sanitizers" where they apply. */
static const char *build_description(void)
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

int cli_version(int argc, char **argv)
{
    (void)argv;
    if (argc != 0)
        return cli_bad_arg("%s", "version takes no arguments");
    printf("oomlab 0.1 (allocator model: PyTorch 2.11; cuda backend %s; %s; commit %s)\n",
           device_cuda_built() ? "built in" : "not built", build_description(), oom_build_commit);
    return 0;
}
