"""Zero-shot evaluation on the seven math benchmarks of the DEL paper (``recipes/evaluate.py``).

benchmarks (loading into one record type) -> prompts -> generation (vLLM or HF) -> extract (answer
from program output or text) -> sandbox (running generated programs) -> scoring (comparison and
metrics) -> report (files and the console table); ``protocol`` ties them together.
"""
