/* status.c - names for oom_status and the last-error record (one per thread, status.h). */
#include "core/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const status_names[OOM_STATUS_COUNT] = {
    [OOM_OK] = "OK",
    [OOM_ENOMEM_DEVICE] = "ENOMEM_DEVICE",
    [OOM_ELIMIT] = "ELIMIT",
    [OOM_ENOMEM_HOST] = "ENOMEM_HOST",
    [OOM_EINVAL] = "EINVAL",
    [OOM_ECUDA] = "ECUDA",
    [OOM_EUNSUPPORTED] = "EUNSUPPORTED",
    [OOM_ENODEV] = "ENODEV",
    [OOM_EIO] = "EIO",
    [OOM_ECORRUPT] = "ECORRUPT",
    [OOM_EAUTOGRAD] = "EAUTOGRAD",
    [OOM_ENOMEM_PINNED] = "ENOMEM_PINNED",
};

const char *oom_status_str(oom_status st)
{
    if ((unsigned)st >= OOM_STATUS_COUNT)
        return "UNKNOWN";
    return status_names[st];
}

/* Per thread (C11 _Thread_local), as errno: a pin thread's failure never overwrites the main thread's detail. */
static _Thread_local char last_msg[512];

void oom_error_set(oom_status st, const char *file, int line, const char *fmt, ...)
{
    int n = snprintf(last_msg, sizeof last_msg, "%s at %s:%d: ", oom_status_str(st), file, line);
    if (n < 0 || (size_t)n >= sizeof last_msg)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_msg + n, sizeof last_msg - (size_t)n, fmt, ap);
    va_end(ap);
}

const char *oom_error_msg(void) { return last_msg; }

const char *oom_error_detail(void)
{
    const char *d = strstr(last_msg, ": "); /* after "STATUS at file:line" */
    return d ? d + 2 : last_msg;
}

void oom_error_clear(void) { last_msg[0] = '\0'; }
