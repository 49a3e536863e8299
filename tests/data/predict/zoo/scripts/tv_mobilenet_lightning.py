"""MobileNetV3-Large (torchvision.models.mobilenet_v3_large) trained by Lightning's Trainer (one GPU, 3 steps,
bf16-mixed precision, no checkpoints or logger), its LightningModule with SGD."""
import argparse
import tempfile

import lightning as L
import torch
import torch.nn.functional as F
import torchvision
from torch.utils.data import DataLoader, TensorDataset


class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.model = torchvision.models.mobilenet_v3_large(num_classes=10)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.model(x), y)
        self.log("train_loss", loss, prog_bar=False)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9, weight_decay=4e-5)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(args.batch * args.steps, 3, 224, 224),
                         torch.randint(0, 10, (args.batch * args.steps,)))
    with tempfile.TemporaryDirectory() as root:
        trainer = L.Trainer(accelerator="gpu", devices=1, max_steps=args.steps, precision="bf16-mixed",
                            logger=False, enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False, default_root_dir=root)
        trainer.fit(Classifier(), DataLoader(data, batch_size=args.batch))
    print(f"trained {trainer.global_step} steps")


if __name__ == "__main__":
    main()
