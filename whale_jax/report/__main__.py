"""python -m whale_jax.report WORKDIR: writes WORKDIR/report.html (see whale_jax.report)."""
import os
import sys

from whale_jax import report


def main(argv):
  if len(argv) != 2:
    sys.stderr.write("usage: python -m whale_jax.report WORKDIR  (a run's work directory, "
                     f"e.g. runs/demo); got {argv[1:]}\n")
    return 2
  if not os.path.isdir(argv[1]):
    sys.stderr.write(f"{argv[1]} is not a directory; give the --workdir a run of "
                     "python -m whale_jax.main wrote to.\n")
    return 2
  print(report.write_report(argv[1]))
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
