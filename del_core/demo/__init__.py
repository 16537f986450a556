"""Offline demonstrations on a real pretrained model (``recipes/loss_demo.py``)."""
