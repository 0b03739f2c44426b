#!/usr/bin/env python3
"""Print the software/hardware versions of the GPU machine (goes into MANIFEST.txt)."""
import datetime
import platform
import subprocess

import torch
import triton


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception as e:  # noqa: BLE001
        return f"<{e!r}>"


print("date_utc:", datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
print("python:", platform.python_version())
print("torch:", torch.__version__, "cuda:", torch.version.cuda)
nv = torch.cuda.nccl.version()
print("nccl:", ".".join(map(str, nv)) if isinstance(nv, tuple) else nv)
print("triton:", triton.__version__)
print("gpus:", torch.cuda.device_count())
for i in range(torch.cuda.device_count()):
    p = torch.cuda.get_device_properties(i)
    print(f"gpu{i}: {p.name} sm={p.major}.{p.minor} SMs={p.multi_processor_count} "
          f"mem={p.total_memory / 2**30:.1f} GiB L2={getattr(p, 'L2_cache_size', 0) / 2**20:.0f} MiB")
print("nvidia-smi:", sh("nvidia-smi --query-gpu=name,driver_version,pci.bus_id,clocks.sm,clocks.max.sm,"
                        "clocks.mem,power.limit --format=csv,noheader"))
print("topology:\n" + sh("nvidia-smi topo -m"))
print("nvlink:\n" + sh("nvidia-smi nvlink -s -i 0 | head -20"))
print("kernel:", platform.release())
