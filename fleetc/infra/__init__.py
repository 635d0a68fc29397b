"""Infrastructure every stage may use and none owns: running work on every core
(:mod:`.forkmap`) and keeping the cycle collector out of allocation-heavy stages
(:mod:`.collector`). Nothing here imports a stage of the pipeline."""
