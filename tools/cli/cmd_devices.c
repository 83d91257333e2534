/* cmd_devices.c - `slim devices`: what this machine can run models on. */
#include "cli.h"

#include "device.h"

#include <stdio.h>

int slim_cmd_devices(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    slim_device *devs[32];
    const char *why = NULL;
    int n = slim_device_list(devs, 32, true, &why);
    for (int i = 0; i < n && i < 32; i++) {
        slim_device *d = devs[i];
        size_t free_b = 0, total_b = 0;
        char f[32], t[32];
        d->backend->mem_info(d, &free_b, &total_b);
        printf("%-8s %s  free %s / total %s\n", d->name, d->description,
               slim_format_bytes(free_b, f, sizeof(f)), slim_format_bytes(total_b, t, sizeof(t)));
    }
    if (why)
        printf("no GPU: %s\n", why);
    return 0;
}
