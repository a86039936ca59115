"""Ends with sys.exit(main()), eagerly and compiled alike: the script's own end, not an early stop."""

import sys

import torch


def main():
    print(torch.compile(lambda x: x * 2, backend="eager")(torch.ones(2)))
    return 0


sys.exit(main())
