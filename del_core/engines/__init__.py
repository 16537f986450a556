"""The training engines, one module each, and the only place del_core imports them:
:mod:`.deepspeed` (ZeRO-2/3, offload, AutoTP, Ulysses sequence parallelism), used by the
DeepSpeed trainer (:mod:`del_core.training`) and the Trainer adapter (:mod:`del_core.integrations`).
A second engine (FSDP2) goes beside it as a module of its own.

Importing this package, or its modules, does not import an engine: each imports its engine inside
the functions that run it.
"""
