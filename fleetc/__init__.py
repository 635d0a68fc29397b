"""fleetc: a declarative GitOps policy compiler for AI workloads on Kubernetes fleets."""

__version__ = "0.1.0"
