"""Runners: the only modules that talk to the outside (Ansible, Helm, Kubernetes, SSH)."""
