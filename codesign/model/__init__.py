"""The differentiable cost model: what is modelled (`workload`, `plan`,
`hardware` and the strategy families) and how one training step is costed
(`stage`, `compute`, `attention`, `memory`, `traffic`, `collectives`,
`overlap`, `fabric`, `step`), with the reliability and economics beside it.
README.md's "Layout" maps each question to its file."""
