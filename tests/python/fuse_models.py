"""fusedlinear.fuse on models that are more than one Linear and its chain:

    python3 tests/python/fuse_models.py LIBRARY

Loads the ops library by its path and the package from the checkout (weights/fusedlinear), then
for each model: the fused module's outputs against the model's (float32, ieee, within 1e-5, under
no_grad and in grad mode), what the report says was fused and left (and why), that the fused
stretches read the module's own parameters, and that something was fused; every demo model of
weights/fx_chain.py fused whole, as the exporter writes its spec; another precision; refusals.
Exits non-zero on the first failure. The models are shared with tests/python/fuse_pytorch2.py.
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "weights"))
import fusedlinear  # noqa: E402  (the checkout's: it loads no library)
import fx_chain  # noqa: E402  (the exporter's demo models)


class PreNormMLP(nn.Module):
    """A pre-norm transformer block's MLP half: x + fc2(gelu(fc1(norm(x))))."""

    def __init__(self, width=32, hidden=128):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, hidden)
        self.fc2 = nn.Linear(hidden, width)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class ResNetHead(nn.Module):
    """A ResNet-style head: pool, flatten, Linear -> ReLU -> Linear."""

    def __init__(self, channels=16, hidden=64, classes=10):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Linear(channels, hidden)
        self.fc2 = nn.Linear(hidden, classes)

    def forward(self, x):
        x = torch.flatten(self.pool(x), 1)
        return self.fc2(F.relu(self.fc1(x)))


class DropoutSoftmaxMLP(nn.Module):
    """Linear -> ReLU -> Dropout -> Linear -> Dropout, then a softmax."""

    def __init__(self, width=32, hidden=64, classes=12):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Dropout(0.2),
                                 nn.Linear(hidden, classes), nn.Dropout(0.1))

    def forward(self, x):
        return torch.softmax(self.net(x), dim=-1)


class GatedFeedForward(nn.Module):
    """LLaMA's feed-forward: w2(silu(w1(x)) * w3(x)), Linears without bias."""

    def __init__(self, width=32, hidden=96):
        super().__init__()
        self.w1 = nn.Linear(width, hidden, bias=False)
        self.w2 = nn.Linear(hidden, width, bias=False)
        self.w3 = nn.Linear(width, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class SharedLinear(nn.Module):
    """A Linear called twice (weight sharing), then a head of two layers."""

    def __init__(self, width=32, hidden=48, classes=8):
        super().__init__()
        self.shared = nn.Linear(width, width)
        self.head1 = nn.Linear(width, hidden)
        self.head2 = nn.Linear(hidden, classes)

    def forward(self, x):
        h = self.shared(torch.tanh(self.shared(x)))
        return self.head2(F.gelu(self.head1(h)))


class PostNormResidual(nn.Module):
    """A post-norm block's MLP half: norm(x + fc2(relu(fc1(x)))), its residual fused."""

    def __init__(self, width=32, hidden=64):
        super().__init__()
        self.fc1 = nn.Linear(width, hidden)
        self.fc2 = nn.Linear(hidden, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        return self.norm(x + self.fc2(F.relu(self.fc1(x))))


class AttentionBlock(nn.Module):
    """A whole pre-norm transformer block: attention (left as it is), then a residual MLP."""

    def __init__(self, width=32, heads=4, hidden=64):
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attention = nn.MultiheadAttention(width, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, hidden), nn.GELU(approximate="tanh"),
                                 nn.Linear(hidden, width))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attention(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


# name -> (the model, an input, the specs fuse must fuse, {a left node's name: words of why})
def models():
    torch.manual_seed(0)
    return {
        "pre_norm_mlp": (PreNormMLP(), torch.randn(2, 7, 32), ["fc1:gelu|fc2"],
                         {"norm": "not an nn.Linear or a pointwise op", "add": "in no stretch"}),
        "resnet_head": (ResNetHead(), torch.randn(5, 16, 4, 4), ["fc1:relu|fc2"],
                        {"pool": "not an nn.Linear", "flatten": "not an nn.Linear"}),
        "dropout_softmax_mlp": (DropoutSoftmaxMLP(), torch.randn(9, 32), ["net.0:relu|net.3"],
                                {"softmax": "not an nn.Linear"}),
        "gated_feed_forward": (GatedFeedForward(), torch.randn(3, 5, 32), ["w1:silu*w3|w2"], {}),
        "shared_linear": (SharedLinear(), torch.randn(6, 32), ["head1:gelu|head2"],
                          {"shared": "called 2 times", "shared_1": "called 2 times",
                           "tanh": "in no stretch"}),
        "post_norm_residual": (PostNormResidual(), torch.randn(4, 32), ["x+(fc1:relu|fc2)"],
                               {"norm": "not an nn.Linear"}),
        "attention_block": (AttentionBlock(), torch.randn(2, 6, 32), ["mlp.0:gelu(tanh)|mlp.2"],
                            {"attention": "not an nn.Linear", "norm1": "not an nn.Linear"}),
    }


def fail(what):
    raise SystemExit("FAIL  " + what)


def check_close(what, got, want, tolerance):
    difference = (got.double() - want.double()).abs().max().item()
    if not torch.allclose(got, want, rtol=tolerance, atol=tolerance):
        fail("%s: max abs difference %.3g, over %g" % (what, difference, tolerance))
    print("ok    %s: max abs difference %.3g" % (what, difference))


def fused_ops(graph_module):
    return [n for n in graph_module.graph.nodes
            if n.op == "call_function" and n.target is torch.ops.fusedlinear.model]


def check_model(name, model, x, specs, left):
    model.eval()
    fused = fusedlinear.fuse(model)
    report = fused.fusion_report
    print(report)
    if not fused_ops(fused) or not report.fused:
        fail("%s: nothing was fused" % name)
    if [spec for spec, _ in report.fused] != specs:
        fail("%s: fused %s, expected %s" % (name, [s for s, _ in report.fused], specs))
    reasons = {node: why for node, _, why in report.left}
    for node, words in left.items():
        if words not in reasons.get(node, ""):
            fail("%s: node %s left for %r, expected %r" % (name, node, reasons.get(node), words))
    with torch.no_grad():
        want = model(x)
        check_close(name + " under no_grad", fused(x), want, 1e-5)
    check_close(name + " in grad mode", fused(x), want, 1e-5)
    # The fused stretches read the module's parameters: a change to them shows in the next call.
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Linear):
                module.weight.mul_(0.5)
        check_close(name + " after its weights changed", fused(x), model(x), 1e-5)


def check_demos():
    """Every demo model of the exporter is one stretch: fused whole, with the exporter's spec."""
    for name in fx_chain.DEMOS:
        torch.manual_seed(0)
        model = fx_chain.build_demo(name).eval()
        x = torch.rand(5, fx_chain.model_in_features(model))
        with torch.no_grad():
            fused = fusedlinear.fuse(model)
            report, spec = fused.fusion_report, str(fusedlinear.trace_model(model))
            if [s for s, _ in report.fused] != [spec] or report.left:
                fail("demo %s: expected %s fused whole, got\n%s" % (name, spec, report))
            check_close("demo %s, %s" % (name, spec), fused(x), model(x), 1e-5)


def check_precision():
    model, x = GatedFeedForward().eval(), torch.rand(16, 32)
    with torch.no_grad():
        want = model.double()(x.double()).float()
        model.float()
        fused = fusedlinear.fuse(model, precision="bf16x3")
        check_close("gated_feed_forward in bf16x3", fused(x), want, 1e-4)


def check_refusals():
    try:
        fusedlinear.fuse(GatedFeedForward(), precision="fp8")
        fail("precision fp8 was taken")
    except ValueError as error:
        print("ok    an unknown precision:", error)
    fused = fusedlinear.fuse(nn.Sequential(nn.LayerNorm(8), nn.Softmax(-1)))
    if fused.fusion_report.fused or len(fused.fusion_report.left) != 2:
        fail("a model with no Linear: %s" % fused.fusion_report)
    print("ok    a model with no Linear: nothing fused, both ops left")


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    torch.ops.load_library(sys.argv[1])
    for name, (model, x, specs, left) in models().items():
        check_model(name, model, x, specs, left)
    check_demos()
    check_precision()
    check_refusals()
    print("fuse: every model fused and matched")


if __name__ == "__main__":
    main()
