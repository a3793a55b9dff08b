"""gpustack: fresh GPU servers to a monitored Kubernetes GPU cluster, with proof."""

__version__ = "0.1.0"
