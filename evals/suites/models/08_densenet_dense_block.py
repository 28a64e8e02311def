"""A DenseNet dense block on 224x224 feature maps: six layers of BatchNorm (training mode) + ReLU + conv 3x3
(growth 32), each reading the channel concatenation of the block's input and every earlier layer's output
(32 -> 224 channels); batch 2."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOLERANCE = 1e-2
ALLOWED_PRECISIONS = ("f32", "tf32", "bf16", "f16")

batch_size, num_layers, in_channels, growth_rate, image_size = 2, 6, 32, 32, 224


class Model(nn.Module):
    def __init__(self, num_layers, in_channels, growth_rate):
        super().__init__()
        self.layers = nn.ModuleList([
            nn.Sequential(nn.BatchNorm2d(in_channels + i * growth_rate), nn.ReLU(inplace=True),
                          nn.Conv2d(in_channels + i * growth_rate, growth_rate, kernel_size=3, padding=1, bias=False))
            for i in range(num_layers)
        ])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = [x]
        for layer in self.layers:
            features.append(layer(torch.cat(features, 1)))
        return torch.cat(features, 1)


def get_inputs():
    return [torch.rand(batch_size, in_channels, image_size, image_size)]


def get_init_inputs():
    return [num_layers, in_channels, growth_rate]
