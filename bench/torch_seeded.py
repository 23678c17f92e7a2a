"""bench/torch_seeded.py SEED SCRIPT [ARGS...] — runs one of ../shared/ref's PyTorch scripts with
torch.manual_seed(SEED) in place of the seed the script fixes (0), so that several seeds of the
reference can be compared with several seeds of lockstep (bench/compare_fashion_mnist.sh)."""
import runpy, sys, torch

seed = int(sys.argv[1])
script = sys.argv[2]
original = torch.manual_seed
torch.manual_seed = lambda _ignored: original(seed)  # the script calls torch.manual_seed(0) once
sys.argv = [script] + sys.argv[3:]
runpy.run_path(script, run_name="__main__")
