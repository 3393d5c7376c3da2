"""Declarative GitOps reconciler for VM placement on libvirt/KVM clusters."""

__version__ = "0.1.0"
