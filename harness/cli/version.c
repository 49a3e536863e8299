/* version.c - `oomlab version`: the version, whether the cuda backend is built in, and which build it is. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/command.h"
#include "cli/buildinfo.h"
#include "device/device.h"

int cli_version(int argc, char **argv)
{
    (void)argv;
    if (argc != 0)
        return cli_bad_arg("%s", "version takes no arguments");
    printf("oomlab 0.1 (allocator model: PyTorch 2.11; cuda backend %s; %s)\n",
           device_cuda_built() ? "built in" : "not built", buildinfo_describe());
    return 0;
}
