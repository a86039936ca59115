import os
import time

import torch


@torch.compile
def f(x):
    return x + 1


f(torch.ones(2))
if os.fork() == 0:
    # an orphan that would outlive the run if the probe did not kill the process group
    time.sleep(600)
    os._exit(0)
print("parent done")
