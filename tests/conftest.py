"""Shared pytest setup: deterministic, single-threaded-friendly defaults for the CPU test suite."""
import torch

torch.manual_seed(0)
