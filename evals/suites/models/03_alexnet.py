"""An AlexNet-like net on 224x224 images: five convs (11x11/4, 5x5, 3x3 x3) with ReLU and three max pools,
then a Linear classifier 9216 -> 4096 -> 4096 -> 1000 (dropout p = 0, as KernelBench writes it); batch 4."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOLERANCE = 1e-2
ALLOWED_PRECISIONS = ("f32", "tf32", "bf16", "f16")

batch_size, image_size, hidden, num_classes = 4, 224, 4096, 1000


class Model(nn.Module):
    def __init__(self, image_size, hidden, num_classes):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 96, kernel_size=11, stride=4, padding=2), nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(96, 256, kernel_size=5, padding=2), nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(256, 384, kernel_size=3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(384, 384, kernel_size=3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(384, 256, kernel_size=3, padding=1), nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
        )
        side = (image_size + 4 - 11) // 4 + 1
        for _ in range(3):
            side = (side - 3) // 2 + 1
        self.classifier = nn.Sequential(
            nn.Linear(256 * side * side, hidden), nn.ReLU(inplace=True), nn.Dropout(p=0.0),
            nn.Linear(hidden, hidden), nn.ReLU(inplace=True), nn.Dropout(p=0.0),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        x = torch.flatten(x, 1)
        return self.classifier(x)


def get_inputs():
    return [torch.rand(batch_size, 3, image_size, image_size)]


def get_init_inputs():
    return [image_size, hidden, num_classes]
