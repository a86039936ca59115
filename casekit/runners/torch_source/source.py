"""The index a target's torch comes from: its channel and variant mapped to PyTorch's layout, or the user's own.

PyTorch publishes each channel per variant, one index each (``https://download.pytorch.org/whl/cpu``,
``…/whl/cu126``, ``…/whl/nightly/cpu``, ``…/whl/test/cu126``); PyPI serves one build per release (a CUDA
build on Linux). ``$CASEKIT_TORCH_INDEX`` names a mirror of that layout; ``--index-url`` or
``--find-links`` replace the mapping altogether. Without ``--cuda``, a release or nightly is a CPU build
unless this host has a GPU: graph breaks are traced with ``backend="eager"``, which needs none, and a CPU
wheel is a tenth of the size.

Pure but `host_has_gpu`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from casekit import settings
from casekit.runners.torch_source.request import Channel, ChannelError, check_variant


def host_has_gpu() -> bool:
    """An NVIDIA driver's control node is here (what CUDA wheels need to be worth their size)."""
    return os.path.exists("/dev/nvidiactl")


@dataclass(frozen=True)
class TorchSource:
    """Where one target's torch comes from: its channel, the variant decided, the index (None: the default)."""

    channel: Channel
    variant: str | None  # "cpu", "cu126"; None: PyPI's build (or whatever the user's own index serves)
    index_url: str | None  # a PyTorch-shaped index of this channel and variant; None: the installer's default
    listed: bool  # casekit reads this index's listing itself (a PyTorch-shaped index), rather than the installer
    note: str | None = None  # one line for the user: why this variant
    links: bool = False  # `index_url` is a find-links location (a folder or a page of links), not an index


def pytorch_index(channel: Channel, variant: str, base: str | None = None) -> str:
    """PyTorch's index (or the mirror in $CASEKIT_TORCH_INDEX) for a channel and a variant."""
    root = (base or settings.torch_index_base()).rstrip("/")
    middle = {Channel.RELEASE: "", Channel.NIGHTLY: "nightly/", Channel.TEST: "test/"}[channel]
    return f"{root}/{middle}{variant}"


def choose_source(
    channel: Channel,
    cuda: str | None,
    *,
    index_url: str | None = None,
    find_links: str | None = None,
    gpu_here: bool | None = None,
) -> TorchSource:
    """The index and variant a target's torch comes from, and the note that says why.

    `--index-url` or `--find-links` replace the mapping (mirrors, air-gapped sites): the installer reads
    them as given. Otherwise a channel with variants goes to PyTorch's index for the variant; with no
    --cuda, the variant is cpu unless this host has a GPU, where a release is PyPI's (CUDA) build.
    """
    variant = check_variant(cuda)
    if channel is Channel.PYPI:
        if variant is not None:
            raise ChannelError(
                f"pypi:… serves one build per release; drop --cuda {variant} or use {variant} without pypi:"
            )
        return TorchSource(channel, None, index_url, listed=False)
    if index_url or find_links:
        if channel is Channel.RELEASE:
            return TorchSource(channel, variant, index_url, listed=False)
        # a nightly or test mirror: its listing says which builds exist (a folder of wheels is read as one)
        return TorchSource(channel, variant, index_url or find_links, listed=True, links=not index_url)
    if variant is not None:
        return TorchSource(channel, variant, pytorch_index(channel, variant), listed=True)
    gpu = host_has_gpu() if gpu_here is None else gpu_here
    if gpu and channel is Channel.RELEASE:
        note = "PyPI's build (CUDA), as a GPU is here; --cuda cpu asks for a CPU build"
        return TorchSource(channel, None, None, listed=False, note=note)
    why = "breaks trace on CPU" if gpu else "no GPU here, and breaks trace on CPU"
    note = f"a CPU build (no --cuda; {why}); --cuda cu126 asks for a CUDA build"
    return TorchSource(channel, "cpu", pytorch_index(channel, "cpu"), listed=True, note=note)
