"""The machine line every benchmark table starts with (bench/*.py import it).

    from machine import machine_line
    print(machine_line(threads))

One line: the CPU model, its family/model numbers (a Zen 4 is family 25, a
Zen 5 family 26; Intel is family 6 and the model tells the generation), the
ISA flags that decide which kernels run (AVX-512, VNNI, BF16, VP2INTERSECT,
AMX), cores, the threads the table used, and the load average: timings from
different machines, or from one shared machine at different loads, are not
to be compared, and this line is how a reader tells.
"""

import os

# The /proc/cpuinfo flags that choose a kernel path or change a peak.
FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16",
         "avx512_vp2intersect", "amx_tile", "amx_int8")


def cpu_fields():
    """(model name, family, model, [flags that matter]) from /proc/cpuinfo;
    '?' and [] where it cannot be read."""
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor's block is enough
                key, _, value = line.partition(":")
                info.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    flags = set(info.get("flags", "").split())
    return (info.get("model name", "?"), info.get("cpu family", "?"), info.get("model", "?"),
            [f for f in FLAGS if f in flags])


def machine_line(threads=None):
    cpu, family, model, flags = cpu_fields()
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return (f"machine: {cpu} (family {family} model {model}; {' '.join(flags) or 'no AVX2'}), "
            f"{os.cpu_count()} cores, threads {threads or 'default'}, "
            f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    print(machine_line())
