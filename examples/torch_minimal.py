"""The smallest meshtrain script: one per host, `meshtrain run [agent options] -- python3
torch_minimal.py [CHECKPOINT]`. A restarted script resumes from the mesh; the end is one model."""
import sys

import torch

import meshtrain.torch as mt

ckpt = sys.argv[1] if len(sys.argv) > 1 else "minimal.pt"
torch.manual_seed(0)  # the same initial model on every host
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
teacher = torch.nn.Linear(16, 4)  # stands for your data: replace with your loader
opt = mt.MeshOptimizer(torch.optim.AdamW(model.parameters(), lr=3e-3), sync_every=10,
                       model=model, outer_optimizer=lambda p: torch.optim.SGD(
                           p, lr=0.7, momentum=0.9, nesterov=True))
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=300)
mt.load_checkpoint(ckpt, model, opt, sched)  # when there is one
torch.seed()  # each host its own batches
while opt.step_count < 300 and opt.training:
    x = torch.randn(32, 16)
    loss = torch.nn.functional.cross_entropy(model(x), teacher(x).argmax(1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()
    if opt.step_count % 50 == 0:
        mt.save_checkpoint(ckpt, model, opt, sched)
        print(f"step {opt.step_count} loss {loss.item():.3f}", flush=True)
print("consensus", opt.finish(), flush=True)
