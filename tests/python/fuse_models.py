"""fusedlinear.fuse on models that are more than one Linear and its chain:

    python3 tests/python/fuse_models.py LIBRARY

Loads the ops library by its path and the package from the checkout (weights/fusedlinear), then
for each model: the fused module's outputs against the model's (float32, ieee, within 1e-5, under
no_grad and in grad mode), what the report says was fused and left (and why), that the fused
stretches read the module's own parameters, and that something was fused; every demo model of
weights/fx_chain.py fused whole, as the exporter writes its spec; another precision; in each split
precision, W split once into non-persistent buffers and split again, and only then, after the
weights change (in place, by load_state_dict on the fused module or the model, a new Parameter,
.double() then .float(), the model's .half() then .float(), in a deep copy and an unpickled one;
through .data with fusedlinear.refresh; .cuda() where there is a GPU; weights made under
inference mode, split on every call; parts made under it, split again outside it), written
into the same buffers where they can be, each output equal to W split afresh and within the
precision's bound of float64; refusals. Exits non-zero on the first failure. The models are
shared with tests/python/fuse_pytorch2.py.
"""
import copy
import io
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


# Each split precision's bound against float64 on these models' inputs (docs/USAGE.md, "Error
# bounds": a fraction of sum |x||w|, which here is within a few times |y|).
SPLIT_BOUNDS = {"bf16": 2e-2, "bf16x3": 1e-4, "bf16x6": 1e-5}


def split_holders(fused):
    return [m for m in fused.modules() if isinstance(m, fusedlinear.SplitWeight)]


def check_split_matches(what, fused, model, x, precision):
    """fused(x) is what the same op gives on W split afresh (split per call: within float32's
    rounding, should a GPU's sums run in another order) and within the precision's bound of the
    model in float64. Parts split from other weights are off by far more (the least change
    made here, W rounded to float16, moves the outputs by more than 1e-4)."""
    with torch.no_grad():
        got = fused(x)
        fresh = fusedlinear.fuse(model, precision=precision, split="per_call")(x)
        difference = (got - fresh).abs().max().item()
        if difference > 1e-6 * (1.0 + fresh.abs().max().item()):
            fail("%s: %s differs from W split afresh by %.3g" % (what, precision, difference))
        want = copy.deepcopy(model).double()(x.double())
        check_close("%s, %s" % (what, precision), got, want.float(), SPLIT_BOUNDS[precision])


def check_split_once(precision):
    """fuse in a split precision splits each W once, keeps its parts as non-persistent buffers,
    and splits it again in the first call after the weight changed in any of the ways a user
    changes weights; a call with nothing changed splits nothing."""
    torch.manual_seed(1)
    model, x = PreNormMLP().eval(), torch.randn(3, 5, 32)
    keys = set(model.state_dict())
    with torch.no_grad():
        fused = fusedlinear.fuse(model, precision=precision)
    print(fused.fusion_report)
    holders = split_holders(fused)
    if len(holders) != 2 or any(n.op == "call_function" and "split_bf16" in str(n.target)
                                for n in fused.graph.nodes):
        fail("%s: expected W split once by 2 SplitWeights, none in the graph:\n%s"
             % (precision, fused.graph))
    if set(fused.state_dict()) != keys:
        fail("%s: the fused state dict's keys %s, expected the model's %s"
             % (precision, sorted(fused.state_dict()), sorted(keys)))
    if not any(name.startswith("bf16_parts.") for name, _ in fused.named_buffers()):
        fail("%s: no buffer bf16_parts.* in %s"
             % (precision, [name for name, _ in fused.named_buffers()]))
    if len(fused.fusion_report.split_weights) != 2 or "split fc1.weight once" not in \
            str(fused.fusion_report):
        fail("%s: the report does not say which weights were split:\n%s"
             % (precision, fused.fusion_report))

    splits = []
    real_refresh = fusedlinear.SplitWeight.refresh

    def counted(holder, weight):
        splits.append(holder)
        real_refresh(holder, weight)
    fusedlinear.SplitWeight.refresh = counted
    try:
        check_split_matches("split once", fused, model, x, precision)
        if splits:
            fail("%s: a call with no weight changed split W %d times" % (precision, len(splits)))
        print("ok    %s: calls with the weights unchanged split nothing" % precision)
        before, buffers = fused(x), [h.hi for h in holders]
        with torch.no_grad():
            model.fc1.weight.mul_(0.5)
        check_split_matches("after an in-place change", fused, model, x, precision)
        if torch.equal(fused(x), before) or len(splits) != 1:
            fail("%s: an in-place change: output unchanged, or %d splits (expected 1)"
                 % (precision, len(splits)))
        if any(h.hi is not buffer for h, buffer in zip(holders, buffers)):
            fail("%s: the parts were not written into their buffers" % precision)
        torch.manual_seed(2)
        other = PreNormMLP().state_dict()
        del splits[:]
        fused.load_state_dict(other)
        if len(splits) != 2:  # the hook splits at once, for a compiled module that does not check
            fail("%s: fused.load_state_dict split %d weights, expected 2"
                 % (precision, len(splits)))
        check_split_matches("after fused.load_state_dict", fused, model, x, precision)
        model.load_state_dict(PreNormMLP().state_dict())  # the shared parameters, not the hook
        check_split_matches("after model.load_state_dict", fused, model, x, precision)
        model.fc2.weight = nn.Parameter(torch.randn_like(model.fc2.weight) * 0.1)
        check_split_matches("after a new Parameter", fused, model, x, precision)
        with torch.no_grad():
            model.fc2.weight.data.mul_(2.0)  # .data bypasses the version counter
            fusedlinear.refresh(fused)
        check_split_matches("after a .data change and refresh", fused, model, x, precision)
        with torch.inference_mode():
            model.fc1.weight.add_(0.01)
            check_split_matches("in inference mode", fused, model, x, precision)
        check_split_matches("after inference mode", fused, model, x, precision)
    finally:
        fusedlinear.SplitWeight.refresh = real_refresh

    saved = io.BytesIO()
    torch.save(fused, saved)
    saved.seek(0)
    unpickled = torch.load(saved, weights_only=False)  # a whole module, not a state dict
    for how, copied in (("a deep copy", copy.deepcopy(fused)), ("an unpickled copy", unpickled)):
        model_copy = copy.deepcopy(model)
        with torch.no_grad():
            for module in (copied, model_copy):
                module.fc1.weight.mul_(-1.0)
        check_split_matches(how + " after its weights changed", copied, model_copy, x, precision)

    fused.double()  # the model's parameters (shared) and the parts, float64
    try:
        fused(x.double())
        fail("%s: a float64 weight was split" % precision)
    except ValueError as error:
        print("ok    %s after .double(): %s" % (precision, error))
    fused.float()
    check_split_matches("after .double() then .float()", fused, model, x, precision)
    model.half()  # the model's own conversion: the parts stay, W is rounded, then new float32
    model.float()
    check_split_matches("after model.half() then .float()", fused, model, x, precision)
    if torch.cuda.is_available():
        fused.cuda()
        check_split_matches("after .cuda()", fused, model, x.cuda(), precision)
        if any(h.hi.device.type != "cuda" for h in split_holders(fused)):
            fail("%s: the parts stayed on the CPU after .cuda()" % precision)
    else:
        print("skip  %s after .cuda(): no CUDA device here" % precision)


def check_inference_mode():
    """Weights made under torch.inference_mode keep no version counter: each call splits them,
    so a change in place still shows. Parts made under it (inference tensors, which cannot be
    written outside it) are replaced when split again outside it."""
    torch.manual_seed(3)
    with torch.inference_mode():
        model, x = GatedFeedForward().eval(), torch.randn(4, 32)
    fused = fusedlinear.fuse(model, precision="bf16x3")
    with torch.inference_mode():
        model.w1.weight.mul_(0.5)
        check_split_matches("inference-tensor weights changed in place", fused, model, x,
                            "bf16x3")
    model = GatedFeedForward().eval()
    with torch.inference_mode():
        fused = fusedlinear.fuse(model, precision="bf16x3")
    with torch.no_grad():
        model.w2.weight.mul_(0.5)
    check_split_matches("parts made in inference mode, split again outside it", fused, model, x,
                        "bf16x3")


def check_refusals():
    try:
        fusedlinear.fuse(GatedFeedForward(), precision="fp8")
        fail("precision fp8 was taken")
    except ValueError as error:
        print("ok    an unknown precision:", error)
    try:
        fusedlinear.fuse(GatedFeedForward(), precision="bf16x3", split="sometimes")
        fail("split 'sometimes' was taken")
    except ValueError as error:
        print("ok    an unknown split:", error)
    try:
        fusedlinear.fuse(GatedFeedForward().double(), precision="bf16x3")
        fail("a float64 model was split")
    except ValueError as error:
        print("ok    a float64 model in bf16x3:", error)
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
    for precision in SPLIT_BOUNDS:
        check_split_once(precision)
    check_inference_mode()
    check_refusals()
    print("fuse: every model fused and matched")


if __name__ == "__main__":
    main()
