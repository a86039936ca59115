import socket

import torch


@torch.compile
def f(x):
    return x + 1


f(torch.ones(2))
socket.create_connection(("192.0.2.1", 80), timeout=2)  # TEST-NET-1: never routed
