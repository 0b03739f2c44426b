# The speculative-decoding study table (README): best k and its speedup per acceptance rate at a
# few batches, and the batch where speculation stops paying, from
# `decodesim whatif spec-decode --acceptance-rate LIST --crossover-batches 1..=256 --format json`
# (a list of studies, one per rate; a single study object works too). Python 3, stdlib only.
import json, sys
studies = json.load(sys.stdin)
studies = studies if isinstance(studies, list) else [studies]
cols = [1, 8, 32, 128, 256]
print("| acceptance rate | " + " | ".join(f"batch {b}" for b in cols)
      + " | speculation stops paying at batch | last batch where it pays |")
print("|---|" + "---|" * (len(cols) + 2))
for s in studies:
    grid = {g["batch"]: g for g in s["crossover"]["grid"]}
    cells = [f'{grid[b]["speedup"]:.2f}x (k={grid[b]["best_draft_tokens"]})' for b in cols]
    paying = [b for b, g in grid.items() if g["speedup"] > 1.0]
    first = s["crossover"]["first_losing_batch"]
    print(f'| {s["acceptance_rate"]} | ' + " | ".join(cells)
          + f' | {first if first else "never (up to 256)"} | {max(paying) if paying else "none"} |')
