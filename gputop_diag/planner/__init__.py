"""The memory planner: where a model's memory goes, and what would make it fit (docs/memory.md).

Pure, over data: `configs` reads a parsed Hugging Face config.json into a `shape.ModelShape`
(its parameter tensors as transformers lays them out); `workload` says how it is run; `terms`
sizes each term of one GPU's memory for a `workload.Workload`, with what each optimizer keeps
per tensor from `optimizers`, weight-only quantisation from `quant` and one GPU's slice under
tensor parallelism from `parallel`; `fit` finds the headroom, the largest batch, the longest
context and the what-ifs; `gpus` knows GPU memory and compute capability by name; `precision`
checks the plan's number formats against the compute capability; `render` makes the JSON
document and the text; `hints` reads a job's command line; `live` sets a plan beside what a
running job holds; `advice` writes the capacity class's checks. Reading files is
`collect/model_config.py`'s.
"""
