"""ONNX models with grouped, depthwise and 1-D convolutions, for bench/vs_onnxruntime.py.

Built with the onnx helper API (through the zoo's graph builder: seeded random weights),
shaped after the real families the issue names, at batch 1:

* ``resnet50``: ResNet-50 (bottleneck blocks, a 7x7 stem and max pooling);
* ``regnet``: a RegNetX-400MF-like net: stem, four stages of X blocks (1x1, grouped 3x3
  with group width 16, 1x1, residual), widths 32-384;
* ``mobilenet``: a MobileNetV3-like net: inverted residual blocks (1x1 expand, depthwise
  3x3 or 5x5, hard-swish or ReLU, 1x1 project, residual);
* ``efficientnet``: an EfficientNet-B0-like net: MBConv blocks with swish and
  squeeze-excite (global pool, two 1x1 convolutions, sigmoid, channel scale);
* ``wav2vec2``: a wav2vec2-like audio front end: seven strided 1-D convolutions (GELU)
  over half a second of 16 kHz audio, a projection, the grouped 1-D positional
  convolution (kernel 128, 16 groups), layer norm and a feed-forward block;
* ``unet``: a U-Net-like segmenter: three down steps of double 3x3 convolutions and max
  pooling, up steps by 2x2 stride-2 transposed convolutions whose outputs are
  concatenated with the encoder's (skip concats), a 1x1 classifier;
* ``crnn``: a CRNN-like text recognizer: a VGG-style conv stack over a 32x128 line
  image, its columns as a 32-step sequence through a bidirectional LSTM, a per-step
  classifier;
* ``convnext``: a ConvNeXt-like stack: a 4x4 stride-4 stem, blocks of 7x7 depthwise
  convolution, channels-last layer norm, a 4x MLP with GELU and layer scale, residual;
  layer-normed 2x2 stride-2 downsampling between stages.

Batch norms carry random statistics (positive variances), so SimplifyInference has
something to fold, as in an exported model.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from passinfra.frontend.zoo.onnx_models import _GraphBuilder


class _Net:
    """A graph builder with the layers these models use (NCHW / NCL tensors)."""

    def __init__(self, seed: int) -> None:
        self.g = _GraphBuilder(seed)

    def conv(self, x: str, cin: int, cout: int, kernel: int | tuple[int, ...], stride: int = 1,
             groups: int = 1, bias: bool = False, rank: int = 2, pad: int | None = None) -> str:
        kernel = (kernel,) * rank if isinstance(kernel, int) else tuple(kernel)
        pads = [k // 2 for k in kernel] if pad is None else [pad] * rank
        weight = self.g.weight("w", (cout, cin // groups, *kernel))
        inputs = [x, weight] + ([self.g.weight("b", (cout,), 0.1)] if bias else [])
        return self.g.node("Conv", inputs, kernel_shape=list(kernel), strides=[stride] * rank,
                           pads=pads + pads, group=groups)

    def bn(self, x: str, channels: int) -> str:
        rng = self.g.rng
        scale = self.g.constant("bn_s", (1 + 0.1 * rng.standard_normal(channels)).astype(np.float32))
        shift = self.g.constant("bn_b", (0.1 * rng.standard_normal(channels)).astype(np.float32))
        mean = self.g.constant("bn_m", (0.1 * rng.standard_normal(channels)).astype(np.float32))
        var = self.g.constant("bn_v", (1 + 0.1 * np.abs(rng.standard_normal(channels))).astype(np.float32))
        return self.g.node("BatchNormalization", [x, scale, shift, mean, var])

    def act(self, x: str, kind: str) -> str:
        if kind == "relu":
            return self.g.node("Relu", [x])
        if kind == "hswish":
            return self.g.node("HardSwish", [x])
        if kind == "swish":
            return self.g.node("Mul", [x, self.g.node("Sigmoid", [x])])
        if kind == "gelu":  # the erf form (the Gelu op needs opset 20)
            g = self.g
            inner = g.node("Erf", [g.node("Mul", [x, g.constant("c", np.float32(0.5 ** 0.5))])])
            one = g.node("Add", [inner, g.constant("one", np.float32(1.0))])
            return g.node("Mul", [g.node("Mul", [x, one]), g.constant("half", np.float32(0.5))])
        raise ValueError(kind)

    def conv_bn(self, x: str, cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1,
                act: str | None = "relu") -> str:
        y = self.bn(self.conv(x, cin, cout, kernel, stride, groups), cout)
        return self.act(y, act) if act else y

    def head(self, x: str, channels: int, classes: int = 1000) -> str:
        pooled = self.g.node("Flatten", [self.g.node("GlobalAveragePool", [x])])
        return self.g.node("Gemm", [pooled, self.g.weight("fc", (classes, channels)),
                                    self.g.weight("fc_b", (classes,), 0.1)], transB=1)

    def model(self, name: str, in_shape: list[int], out: str, out_shape: list[int]) -> onnx.ModelProto:
        inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, in_shape)]
        return self.g.model(name, inputs, out, out_shape)


def resnet50(seed: int = 0) -> onnx.ModelProto:
    """ResNet-50 (v1.5): a 7x7 stride-2 stem and max pooling, bottleneck stages of 3, 4, 6
    and 3 blocks (1x1, 3x3 with the stride, 1x1 to four times the width, residual) of
    widths 64-512."""
    net = _Net(seed)
    x = net.conv_bn("input", 3, 64, 7, 2)
    x = net.g.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, (width, depth) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3))):
        for block in range(depth):
            stride = 2 if block == 0 and stage > 0 else 1
            y = net.conv_bn(x, cin, width, 1)
            y = net.conv_bn(y, width, width, 3, stride)
            y = net.conv_bn(y, width, 4 * width, 1, act=None)
            shortcut = x if block else net.conv_bn(x, cin, 4 * width, 1, stride, act=None)
            x = net.act(net.g.node("Add", [y, shortcut]), "relu")
            cin = 4 * width
    return net.model("resnet50", [1, 3, 224, 224], net.head(x, cin), [1, 1000])


def regnet(seed: int = 0) -> onnx.ModelProto:
    """RegNetX-400MF-like: group width 16, widths 32/64/160/384, depths 1/2/3/3."""
    net = _Net(seed)
    x = net.conv_bn("input", 3, 32, 3, 2)
    cin = 32
    for width, depth in ((32, 1), (64, 2), (160, 3), (384, 3)):
        for block in range(depth):
            stride = 2 if block == 0 else 1
            y = net.conv_bn(x, cin, width, 1)
            y = net.conv_bn(y, width, width, 3, stride, groups=width // 16)
            y = net.conv_bn(y, width, width, 1, act=None)
            same = stride == 1 and cin == width
            shortcut = x if same else net.conv_bn(x, cin, width, 1, stride, act=None)
            x = net.act(net.g.node("Add", [y, shortcut]), "relu")
            cin = width
    return net.model("regnet_like", [1, 3, 224, 224], net.head(x, cin), [1, 1000])


def mobilenet(seed: int = 0) -> onnx.ModelProto:
    """MobileNetV3-small-like: depthwise 3x3/5x5, hard-swish and ReLU, residuals."""
    net = _Net(seed)
    x = net.conv_bn("input", 3, 16, 3, 2, act="hswish")
    cin = 16
    # (expanded, out, kernel, stride, activation)
    blocks = [(16, 16, 3, 2, "relu"), (72, 24, 3, 2, "relu"), (88, 24, 3, 1, "relu"),
              (96, 40, 5, 2, "hswish"), (240, 40, 5, 1, "hswish"), (240, 40, 5, 1, "hswish"),
              (120, 48, 5, 1, "hswish"), (144, 48, 5, 1, "hswish"), (288, 96, 5, 2, "hswish"),
              (576, 96, 5, 1, "hswish"), (576, 96, 5, 1, "hswish")]
    for expanded, cout, kernel, stride, act in blocks:
        y = net.conv_bn(x, cin, expanded, 1, act=act) if expanded != cin else x
        y = net.conv_bn(y, expanded, expanded, kernel, stride, groups=expanded, act=act)
        y = net.conv_bn(y, expanded, cout, 1, act=None)
        x = net.g.node("Add", [y, x]) if stride == 1 and cin == cout else y
        cin = cout
    x = net.conv_bn(x, cin, 576, 1, act="hswish")
    return net.model("mobilenet_like", [1, 3, 224, 224], net.head(x, 576), [1, 1000])


def efficientnet(seed: int = 0) -> onnx.ModelProto:
    """EfficientNet-B0-like: MBConv with swish and squeeze-excite (ratio 1/4 of the input)."""
    net = _Net(seed)
    x = net.conv_bn("input", 3, 32, 3, 2, act="swish")
    cin = 32
    # (expansion, out, kernel, stride, repeats)
    stages = [(1, 16, 3, 1, 1), (6, 24, 3, 2, 2), (6, 40, 5, 2, 2), (6, 80, 3, 2, 3),
              (6, 112, 5, 1, 3), (6, 192, 5, 2, 4), (6, 320, 3, 1, 1)]
    for expansion, cout, kernel, first_stride, repeats in stages:
        for block in range(repeats):
            stride = first_stride if block == 0 else 1
            expanded = cin * expansion
            y = net.conv_bn(x, cin, expanded, 1, act="swish") if expansion != 1 else x
            y = net.conv_bn(y, expanded, expanded, kernel, stride, groups=expanded, act="swish")
            squeezed = max(1, cin // 4)
            s = net.g.node("GlobalAveragePool", [y])
            s = net.act(net.conv(s, expanded, squeezed, 1, bias=True), "swish")
            s = net.g.node("Sigmoid", [net.conv(s, squeezed, expanded, 1, bias=True)])
            y = net.g.node("Mul", [y, s])
            y = net.conv_bn(y, expanded, cout, 1, act=None)
            x = net.g.node("Add", [y, x]) if stride == 1 and cin == cout else y
            cin = cout
    x = net.conv_bn(x, cin, 1280, 1, act="swish")
    return net.model("efficientnet_like", [1, 3, 224, 224], net.head(x, 1280), [1, 1000])


def wav2vec2(seed: int = 0, samples: int = 8000, channels: int = 256, hidden: int = 384) -> onnx.ModelProto:
    """wav2vec2-like front end: conv feature extractor, projection, grouped positional
    1-D convolution (kernel 128, 16 groups), layer norm, feed-forward."""
    net = _Net(seed)
    g = net.g
    x, cin, length = "input", 1, samples
    for kernel, stride in ((10, 5), (3, 2), (3, 2), (3, 2), (3, 2), (2, 2), (2, 2)):
        x = net.act(net.conv(x, cin, channels, kernel, stride, rank=1, pad=0), "gelu")
        cin, length = channels, (length - kernel) // stride + 1
    frames = g.node("Transpose", [x], perm=[0, 2, 1])  # [1, T, C]
    frames = _layer_norm(net, frames, channels)
    hidden_states = g.node("MatMul", [frames, g.weight("proj", (channels, hidden))])
    channels_first = g.node("Transpose", [hidden_states], perm=[0, 2, 1])  # [1, H, T]
    pos = net.conv(channels_first, hidden, hidden, 128, 1, groups=16, bias=True, rank=1, pad=64)
    # the even kernel gives one frame too many: wav2vec2 drops the last
    pos = g.node("Slice", [pos, g.constant("starts", np.array([0], np.int64)),
                           g.constant("ends", np.array([length], np.int64)),
                           g.constant("axes", np.array([2], np.int64))])
    pos = net.act(pos, "gelu")
    summed = g.node("Add", [hidden_states, g.node("Transpose", [pos], perm=[0, 2, 1])])
    normed = _layer_norm(net, summed, hidden)
    ff = net.act(g.node("MatMul", [normed, g.weight("ff1", (hidden, 4 * hidden))]), "gelu")
    ff = g.node("MatMul", [ff, g.weight("ff2", (4 * hidden, hidden))])
    out = _layer_norm(net, g.node("Add", [normed, ff]), hidden)
    return net.model("wav2vec2_like", [1, 1, samples], out, [1, length, hidden])


def unet(seed: int = 0, size: int = 128, base: int = 16) -> onnx.ModelProto:
    """U-Net-like: double 3x3 conv blocks, max-pool down, 2x2 stride-2 ConvTranspose up,
    skip concats, 1x1 classifier (2 classes)."""
    net = _Net(seed)
    g = net.g

    def double(x: str, cin: int, cout: int) -> str:
        return net.conv_bn(net.conv_bn(x, cin, cout, 3), cout, cout, 3)

    x, cin, skips = "input", 3, []
    widths = [base, 2 * base, 4 * base]
    for width in widths:
        x = double(x, cin, width)
        skips.append((x, width))
        x = g.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
        cin = width
    x = double(x, cin, 8 * base)
    cin = 8 * base
    for skip, width in reversed(skips):
        up = g.node("ConvTranspose", [x, g.weight("up", (cin, width, 2, 2)), g.weight("up_b", (width,), 0.1)],
                    kernel_shape=[2, 2], strides=[2, 2])
        x = double(g.node("Concat", [up, skip], axis=1), 2 * width, width)
        cin = width
    out = net.conv(x, cin, 2, 1, bias=True)
    return net.model("unet_like", [1, 3, size, size], out, [1, 2, size, size])


def crnn(seed: int = 0, width: int = 128, hidden: int = 128, classes: int = 37) -> onnx.ModelProto:
    """CRNN-like: conv stack over a [1, 1, 32, width] line image, its width / 4 columns
    as a sequence through a bidirectional LSTM, a classifier per step."""
    net = _Net(seed)
    g = net.g
    x = net.act(net.conv("input", 1, 64, 3, bias=True), "relu")
    x = g.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])  # 16 x w/2
    x = net.act(net.conv(x, 64, 128, 3, bias=True), "relu")
    x = g.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])  # 8 x w/4
    x = net.conv_bn(x, 128, 256, 3)
    x = net.act(net.conv(x, 256, 256, 3, bias=True), "relu")
    x = g.node("MaxPool", [x], kernel_shape=[2, 1], strides=[2, 1])  # 4 x w/4
    x = net.conv_bn(x, 256, 256, 3)
    x = g.node("MaxPool", [x], kernel_shape=[4, 1], strides=[4, 1])  # 1 x w/4
    steps = width // 4
    seq = g.node("Transpose", [g.node("Squeeze", [x, g.constant("axis", np.array([2], np.int64))])],
                 perm=[2, 0, 1])  # [T, 1, 256]
    w = g.weight("lstm_w", (2, 4 * hidden, 256))
    r = g.weight("lstm_r", (2, 4 * hidden, hidden))
    b = g.weight("lstm_b", (2, 8 * hidden), 0.1)
    y = g.node("LSTM", [seq, w, r, b], num_outputs=1, hidden_size=hidden, direction="bidirectional")
    y = g.node("Reshape", [g.node("Transpose", [y], perm=[0, 2, 1, 3]),
                          g.constant("shape", np.array([steps, 1, 2 * hidden], np.int64))])
    logits = g.node("Add", [g.node("MatMul", [y, g.weight("fc", (2 * hidden, classes))]),
                            g.weight("fc_b", (classes,), 0.1)])
    return net.model("crnn_like", [1, 1, 32, width], logits, [steps, 1, classes])


def convnext(seed: int = 0, size: int = 128, widths: tuple[int, ...] = (48, 96, 192, 384),
             depths: tuple[int, ...] = (2, 2, 4, 2)) -> onnx.ModelProto:
    """ConvNeXt-like: patchify stem, blocks of 7x7 depthwise conv, channels-last layer
    norm, Linear 4x, GELU, Linear, layer scale, residual; layer norm + 2x2 stride-2 conv
    between stages."""
    net = _Net(seed)
    g = net.g

    def channels_norm(x: str, width: int) -> str:  # layer norm over C of NCHW
        nhwc = g.node("Transpose", [x], perm=[0, 2, 3, 1])
        return g.node("Transpose", [_layer_norm(net, nhwc, width)], perm=[0, 3, 1, 2])

    x = channels_norm(net.conv("input", 3, widths[0], 4, 4, bias=True, pad=0), widths[0])
    cin = widths[0]
    for stage, (width, depth) in enumerate(zip(widths, depths)):
        if stage:
            x = net.conv(channels_norm(x, cin), cin, width, 2, 2, bias=True, pad=0)
        for _ in range(depth):
            y = net.conv(x, width, width, 7, groups=width, bias=True)
            y = _layer_norm(net, g.node("Transpose", [y], perm=[0, 2, 3, 1]), width)
            y = g.node("Add", [g.node("MatMul", [y, g.weight("pw1", (width, 4 * width))]),
                               g.weight("pw1_b", (4 * width,), 0.1)])
            y = net.act(y, "gelu")
            y = g.node("Add", [g.node("MatMul", [y, g.weight("pw2", (4 * width, width))]),
                               g.weight("pw2_b", (width,), 0.1)])
            y = g.node("Mul", [y, g.constant("gamma", np.full(width, 0.1, np.float32))])
            x = g.node("Add", [x, g.node("Transpose", [y], perm=[0, 3, 1, 2])])
        cin = width
    pooled = g.node("Flatten", [g.node("GlobalAveragePool", [x])])
    logits = g.node("Gemm", [_layer_norm(net, pooled, cin), g.weight("fc", (1000, cin)),
                             g.weight("fc_b", (1000,), 0.1)], transB=1)
    return net.model("convnext_like", [1, 3, size, size], logits, [1, 1000])


def _layer_norm(net: _Net, x: str, width: int) -> str:
    scale = net.g.constant("ln_s", np.ones(width, np.float32))
    shift = net.g.constant("ln_b", np.zeros(width, np.float32))
    return net.g.node("LayerNormalization", [x, scale, shift], axis=-1)


MODELS = {
    "RegNetX-like (grouped 3x3, group width 16)": regnet,
    "MobileNetV3-like (depthwise, hard-swish)": mobilenet,
    "EfficientNet-B0-like (depthwise, squeeze-excite)": efficientnet,
    "wav2vec2-like (grouped 1-D positional conv)": wav2vec2,
    "U-Net-like (transposed convs, skip concats)": unet,
    "CRNN-like (conv stack, bidirectional LSTM)": crnn,
    "ConvNeXt-like (7x7 depthwise, layer norm, GELU)": convnext,
}

__all__ = ["MODELS", "convnext", "crnn", "efficientnet", "mobilenet", "regnet", "unet", "wav2vec2"]
