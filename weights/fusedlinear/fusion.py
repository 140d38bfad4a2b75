"""fuse(module): a torch.fx pass that runs a module's Linear -> pointwise stretches, its MLPs and
its gated and residual blocks as fusedlinear's whole-model op, and leaves the rest as it is.

    fused = fusedlinear.fuse(model)                 # an fx.GraphModule, the same outputs
    fused = fusedlinear.fuse(model, precision="bf16x3", report=True)   # prints what it did
    print(fused.fusion_report)                      # what was fused, what was left and why

A stretch is what the exporter accepts (docs/CHAINS.md): the pass cuts the model's graph into
stretches that start at an nn.Linear's input, hands each to the exporter's recogniser
(export.graph_spec) and replaces each accepted one, the longest first, with one call of
torch.ops.fusedlinear.model on the module's own parameters (get_attr nodes: no copies). The
split precisions (bf16, bf16x3, bf16x6) take W's bfloat16 parts too: fuse splits each W once and
keeps the parts as buffers of the fused module (SplitWeight), split again when W changes (the
check is SplitWeight's; fusedlinear.refresh splits them at once). The fused ops are inference
ops: a fused stretch runs as in eval mode (dropout is the identity) and carries no gradient.
"""
import collections
import functools
import importlib
import operator

import torch
import torch.fx
import torch.nn as nn

from . import export
from ._library import ops_loaded
from .model_op import op_arguments

# precision -> (the op splitting W into the parts it takes, how many of them), None: W as it is.
PRECISIONS = {
    "ieee": None,
    "tf32": None,
    "bf16": ("split_bf16", 1),
    "bf16x3": ("split_bf16", 2),
    "bf16x6": ("split_bf16_three", 3),
}
# The names of W's bfloat16 parts, in the order the fused op takes them after W, by their count.
PART_NAMES = {1: ("hi",), 2: ("hi", "lo"), 3: ("hi", "mid", "lo")}
# How a split precision gets W's parts: split once by fuse and kept (SplitWeight), or split in
# the graph on every call.
SPLITS = ("once", "per_call")
SPLIT_MODULE = "bf16_parts"  # the fused module's submodule that holds the SplitWeights
CALLS = ("call_module", "call_function", "call_method")
VOCABULARY = "an nn.Linear or a pointwise op of fusedlinear's vocabulary (docs/CHAINS.md)"


class FusionReport:
    """What fuse did: `fused`, one (spec, [node names]) a stretch; `left`, one (node name, what
    it is, why it was left) an op that runs as before; and for a split precision
    `split_weights`, one (weight's key, its parts' names, the SplitWeight's name, or None where
    the graph splits it on every call) a W the fused ops take split. str() is a readable
    summary."""

    def __init__(self, precision):
        self.precision, self.fused, self.left, self.split_weights = precision, [], [], []

    def __str__(self):
        lines = ["fusedlinear.fuse (precision %s): %d stretch%s fused, %d op%s left"
                 % (self.precision, len(self.fused), "" if len(self.fused) == 1 else "es",
                    len(self.left), "" if len(self.left) == 1 else "s")]
        for spec, nodes in self.fused:
            lines.append("  fused %s  (%s)" % (spec, ", ".join(nodes)))
        for weight, parts, holder in self.split_weights:
            if holder is not None:
                lines.append("  split %s once into %s (buffers of %s), again when it changes"
                             % (weight, ", ".join(parts), holder))
            else:
                lines.append("  split %s into %s on every call" % (weight, ", ".join(parts)))
        for name, what, why in self.left:
            lines.append("  left  %s, %s: %s" % (name, what, why))
        return "\n".join(lines)


class _Stretch:
    """A part of the graph that one op can run: its input node, its nodes in graph order (the
    last is its output) and the ModelSpec the recogniser made of them."""

    def __init__(self, source, nodes, spec):
        self.source, self.nodes, self.spec = source, nodes, spec


def _input_of(node):
    value = node.args[0] if node.args else node.kwargs.get("input")
    return value if isinstance(value, torch.fx.Node) else None


class _Graph:
    """The traced model's graph and what the search of its stretches asks of it."""

    def __init__(self, graph_module, model):
        self.graph = graph_module.graph
        self.nodes = list(self.graph.nodes)
        self.order = {node: i for i, node in enumerate(self.nodes)}
        self.modules = dict(model.named_modules())
        self.state = model.state_dict(keep_vars=True)
        self.linears = [n for n in self.nodes if n.op == "call_module"
                        and isinstance(self.modules.get(n.target), nn.Linear)]
        self.calls = collections.Counter(n.target for n in self.linears)
        self.descendants, self.fusable = {}, {}

    def may_fuse(self, node):
        """Whether node can be part of a stretch: a Linear called once, a chunk or one of its
        halves, or an op the exporter reads as one of the vocabulary's."""
        if node not in self.fusable:
            self.fusable[node] = self._may_fuse(node)
        return self.fusable[node]

    def _may_fuse(self, node):
        if node.op not in CALLS:
            return False
        if node in self.linears:
            return self.calls[node.target] == 1
        if (node.op, node.target) in (("call_method", "chunk"), ("call_function", torch.chunk),
                                      ("call_function", operator.getitem)):
            return True
        try:
            return export.classify(node, self.modules) is not None
        except export.ChainError:  # arguments the exporter refuses
            return False

    def below(self, source):
        """Every node computed from source (its descendants)."""
        if source not in self.descendants:
            found, stack = set(), [source]
            while stack:
                for user in stack.pop().users:
                    if user not in found:
                        found.add(user)
                        stack.append(user)
            self.descendants[source] = found
        return self.descendants[source]

    def between(self, source, output):
        """The nodes on the paths from source to output, in graph order, or None when a node
        among them takes a value from outside or gives one to outside (but output)."""
        below = self.below(source)
        if output not in below:
            return None
        nodes, stack = {output}, [output]
        while stack:
            for used in stack.pop().all_input_nodes:
                if used in below and used not in nodes:
                    nodes.add(used)
                    stack.append(used)
        for node in nodes:
            if any(used is not source and used not in nodes and used.op != "get_attr"
                   for used in node.all_input_nodes):
                return None
            if node is not output and any(user not in nodes for user in node.users):
                return None
        return sorted(nodes, key=self.order.get)

    def recognise(self, source, nodes):
        """The ModelSpec of the stretch source -> nodes, as the exporter reads it (ChainError
        when it refuses it)."""
        sub = torch.fx.Graph()
        copies = {source: sub.placeholder(source.name)}

        def copy_of(node):
            if node not in copies:  # a parameter the stretch reads
                copies[node] = sub.get_attr(node.target)
            return copies[node]

        for node in nodes:
            copies[node] = sub.node_copy(node, copy_of)
        sub.output(copies[nodes[-1]])
        return export.graph_spec(sub, self.modules, self.state)

    def stretch_at(self, output, taken):
        """The longest stretch that ends at output and shares no node with `taken`, or None."""
        best = None
        sources = dict.fromkeys(_input_of(n) for n in self.linears
                                if self.order[n] <= self.order[output] and n not in taken)
        for source in sources:
            if source is None:
                continue
            nodes = self.between(source, output)
            if not nodes or (best and len(nodes) <= len(best.nodes)) or taken.intersection(nodes) \
                    or not all(self.may_fuse(n) for n in nodes):
                continue
            try:
                best = _Stretch(source, nodes, self.recognise(source, nodes))
            except export.ChainError:
                continue
        return best

    def stretches(self):
        """Disjoint stretches, the one ending last first, each the longest ending there."""
        found, taken = [], set()
        for output in reversed(self.nodes):
            if output in taken or not self.may_fuse(output):
                continue
            stretch = self.stretch_at(output, taken)
            if stretch is not None:
                found.append(stretch)
                taken.update(stretch.nodes)
        return found[::-1]

    def why_left(self, node):
        """Why node runs as before, in a line."""
        if node in self.linears:
            if self.calls[node.target] > 1:
                return ("the Linear '%s' is called %d times; a fused stretch calls each Linear "
                        "once" % (node.target, self.calls[node.target]))
            users = list(node.users)
            if len(users) != 1:
                return "its output is taken by %d ops (%s)" % (
                    len(users), ", ".join(u.name for u in users) or "none")
            if not self.may_fuse(users[0]):
                return "no pointwise op after it (node '%s' is not one): a Linear alone runs " \
                       "as PyTorch's" % users[0].name
            source = _input_of(node)
            nodes = self.between(source, users[0]) if source is not None else None
            if nodes:
                try:
                    self.recognise(source, nodes)
                except export.ChainError as error:
                    return str(error).replace("fx_chain: ", "", 1)
            return "no stretch through it is one the exporter accepts"
        if not self.may_fuse(node):
            return "not %s" % VOCABULARY
        return "in no stretch the exporter accepts (one starts at an nn.Linear's input and " \
               "takes nothing else from outside it)"


class _ParameterNodes(collections.abc.Mapping):
    """The model's state dict as get_attr nodes of the graph, made when first asked for: what
    op_arguments takes as a state dict, so that the op's arguments are the module's own
    parameters."""

    def __init__(self, graph, keys):
        self.graph, self.keys, self.nodes = graph, keys, {}

    def __getitem__(self, key):
        if key not in self.keys:
            raise KeyError(key)
        if key not in self.nodes:
            self.nodes[key] = self.graph.get_attr(key)
        return self.nodes[key]

    def __iter__(self):
        return iter(self.keys)

    def __len__(self):
        return len(self.keys)


def _compiling_check():
    """The function telling whether torch.compile or torch.export is tracing the call:
    torch.compiler.is_compiling (torch 2.3 on), torch._dynamo.is_compiling (2.0 to 2.2); on 1.x,
    which has neither, nothing traces that way."""
    compiler = getattr(torch, "compiler", None)
    if hasattr(compiler, "is_compiling"):
        return compiler.is_compiling
    if int(torch.__version__.split(".")[0]) >= 2:
        return importlib.import_module("torch._dynamo").is_compiling
    return lambda: False


_is_compiling = _compiling_check()


def _runs_eagerly(weight):
    """Whether this call runs in Python on the weight itself, so that its version can be read:
    not under torch.compile or torch.export (their tracers take is_compiling() for the constant
    True, so the branch costs no graph break), not in a TorchScript trace, and not on a
    tracer's stand-in (fx's Proxy, a fake tensor)."""
    if _is_compiling():
        return False
    return not torch.jit.is_tracing() and type(weight) in (torch.Tensor, nn.Parameter)


class SplitWeight(nn.Module):
    """A weight's bfloat16 parts for a split precision (bf16: hi; bf16x3: hi, lo; bf16x6: hi, mid,
    lo), split once and kept as non-persistent buffers, so that a call of the fused op reads them
    rather than splitting W again. Buffers, so they follow .to() and .cuda() and torch.export and
    AOTInductor capture them as the program's constants; non-persistent, so the fused module's
    state_dict stays the model's own (it loads into the model and the model's into it) and no file
    holds parts that could disagree with its weights.

    Called with the weight (the graph passes the module's own parameter), it returns the parts.
    In a call that runs eagerly it first checks that the weight is still the one they were split
    from (its storage, layout and version counter: split_from) and splits it again if not, so a
    change by load_state_dict, in place, by .to() or a new Parameter shows in that call. Under
    torch.compile and torch.export the check is left out: there a tensor's version is a value
    known only when the graph runs, and a branch on it is a graph break; the compiled graph reads
    the buffers as they are, so after changing the weights of a compiled module call
    fusedlinear.refresh (fused.load_state_dict does it). Changes through `w.data`, which bypass
    the version counter, need fusedlinear.refresh too. A weight that is an inference tensor (made
    under torch.inference_mode) keeps no version counter, so a call splits it every time."""

    def __init__(self, weight, precision):
        super().__init__()
        self.precision = precision
        self.split, count = PRECISIONS[precision]
        self.parts = PART_NAMES[count]
        for name in self.parts:
            self.register_buffer(name, None, persistent=False)
        self.source = None
        self.refresh(weight)

    def refresh(self, weight):
        """Splits weight into the parts now, written into the buffers where they can take them,
        so that what holds their addresses (a CUDA graph of a compiled module) reads the new
        parts; a new buffer where W's shape, dtype or device changed, or where the old one is an
        inference tensor, which cannot be written outside inference mode."""
        if weight.dtype != torch.float32:
            raise ValueError("fusedlinear: precision %s splits float32 weights, and this one is %s;"
                             " convert the model back (.float()) or fuse it with precision ieee"
                             % (self.precision, weight.dtype))
        with torch.no_grad():
            parts = getattr(torch.ops.fusedlinear, self.split)(weight.detach())
        for name, part in zip(self.parts, parts):
            current = getattr(self, name)
            if current is not None and current.shape == part.shape and \
                    current.dtype == part.dtype and current.device == part.device and \
                    (torch.is_inference_mode_enabled() or not current.is_inference()):
                current.copy_(part)
            else:
                setattr(self, name, part)
        # (a view of weight, its version): the view holds the storage, so that while the parts
        # say they come from it no other tensor can be given its address; in a tuple, which
        # torch.export does not take for one of the module's tensor constants. An inference
        # tensor keeps no version counter: nothing to hold, and a call splits it every time.
        self.source = None if weight.is_inference() else (weight.detach(), weight._version)

    def split_from(self, weight):
        """Whether the parts were split from weight as it is now: the same storage, layout and
        dtype, and no in-place change since (its version counter)."""
        if self.source is None:
            return False
        view, version = self.source
        return (weight.data_ptr() == view.data_ptr() and weight.device == view.device
                and weight.dtype == view.dtype and weight.shape == view.shape
                and weight.stride() == view.stride() and weight._version == version)

    def _apply(self, *args, **kwargs):
        # The fused module is moved or converted (.to(), .cuda(), .double()): the parts are too,
        # and the weight's old storage need not be held; the next eager call splits it again.
        self.source = None
        return super()._apply(*args, **kwargs)

    def forward(self, weight):
        if _runs_eagerly(weight) and not self.split_from(weight):
            self.refresh(weight)
        return tuple([getattr(self, name) for name in self.parts])


def refresh(fused):
    """Splits every weight of `fused` (what fuse returned, or torch.compile of it) into its
    bfloat16 parts again, now. A call that runs eagerly does it by itself when a weight changed;
    a compiled one does not check (SplitWeight says why), so call this after changing the weights
    of a module that runs compiled. Does nothing where fuse kept no parts (ieee, tf32,
    split="per_call")."""
    fused = getattr(fused, "_orig_mod", fused)  # torch.compile's wrapper holds the module there
    for node in fused.graph.nodes:
        if node.op == "call_module":
            holder = fused.get_submodule(node.target)
            if isinstance(holder, SplitWeight):
                holder.refresh(functools.reduce(getattr, node.args[0].target.split("."), fused))


def _refresh_after_load(fused, incompatible_keys):
    """load_state_dict's post hook on a fused module: its new weights split at once, so that a
    compiled module, which does not check, runs them too."""
    del incompatible_keys  # every W is split again, whichever keys the state dict held
    refresh(fused)


def _free_name(module, name):
    """name, or name_1, name_2, ...: the first that module has no attribute by."""
    candidate, number = name, 0
    while hasattr(module, candidate):
        number += 1
        candidate = "%s_%d" % (name, number)
    return candidate


def _items(node, count):
    """Nodes taking the `count` items of node's tuple, one each."""
    return [node.graph.call_function(operator.getitem, (node, i)) for i in range(count)]


def _parts_split_once(graph_module, state, precision, summary):
    """The function giving, for W's get_attr node, the nodes of its parts for `precision`: a
    SplitWeight made now, in graph_module's SPLIT_MODULE submodule, called on W."""
    container = _free_name(graph_module, SPLIT_MODULE)

    def parts_of(weight):
        holder = SplitWeight(state[weight.target], precision)
        name = weight.target.replace(".", "_")
        if hasattr(graph_module, container):
            name = _free_name(getattr(graph_module, container), name)
        target = container + "." + name
        graph_module.add_submodule(target, holder)
        summary.split_weights.append((weight.target, holder.parts, target))
        return _items(weight.graph.call_module(target, (weight,)), len(holder.parts))
    return parts_of


def _parts_split_per_call(precision, summary):
    """The function giving, for W's get_attr node, the nodes of its parts for `precision`: the
    split op on W in the graph, run on every call."""
    split, count = PRECISIONS[precision]

    def parts_of(weight):
        summary.split_weights.append((weight.target, PART_NAMES[count], None))
        return _items(weight.graph.call_function(getattr(torch.ops.fusedlinear, split), (weight,)),
                      count)
    return parts_of


def _replace(graph, keys, stretch, source, precision, parts_of):
    """Replaces the stretch's nodes by one call of the whole-model op on source, each W followed
    by parts_of(W) (its bfloat16 parts' nodes, for a split precision); returns that node."""
    output = stretch.nodes[-1]
    with graph.inserting_before(output):
        weights, biases, params, spec = op_arguments(_ParameterNodes(graph, keys),
                                                     str(stretch.spec))
        operands = []
        for w in weights:
            operands.append(w)
            if parts_of is not None:
                operands += parts_of(w)
        fused = graph.create_node("call_function", torch.ops.fusedlinear.model,
                                  (source, operands, biases, params, spec, precision),
                                  name="fused")
    output.replace_all_uses_with(fused)
    read = {n for node in stretch.nodes for n in node.all_input_nodes if n.op == "get_attr"}
    for node in reversed(stretch.nodes):
        graph.erase_node(node)
    for node in read:
        if not node.users:
            graph.erase_node(node)
    return fused


def fuse(module, precision="ieee", report=False, split="once"):
    """An fx.GraphModule computing what `module` computes, each stretch fusedlinear runs (an
    nn.Linear and the pointwise ops after it, an MLP of such layers, a gated pair, a Linear's two
    halves, the input added to the output) replaced by one call of torch.ops.fusedlinear.model
    in `precision` (ieee, tf32, bf16, bf16x3, bf16x6: docs/USAGE.md, "GEMM precision"); the rest
    (normalisations, softmax, attention, a Linear called twice, ...) as it was. Its
    `fusion_report` (a FusionReport) lists both, with the reasons; report=True prints it.

    The split precisions (bf16, bf16x3, bf16x6) take each W with its bfloat16 parts. With
    split="once" (the default) fuse splits each W now and keeps the parts as buffers of a
    SplitWeight under the submodule `bf16_parts`: a call that runs eagerly splits a W again when
    it changed; a compiled one reads the parts as they are, so after changing the weights of a
    compiled module call fusedlinear.refresh (the fused module's load_state_dict does it).
    split="per_call" splits W in the graph on every call instead: no parts kept, one more pass
    over every W per call.

    The module is traced with torch.fx in eval mode (a forward without data-dependent control
    flow); the result shares the module's parameters and submodules. ChainError when it cannot
    be traced; ValueError for an unknown precision or split, or a split precision with a weight
    that is not float32; RuntimeError when the ops are not loaded."""
    if precision not in PRECISIONS:
        raise ValueError("fusedlinear.fuse: precision %r; expected one of %s"
                         % (precision, ", ".join(PRECISIONS)))
    if split not in SPLITS:
        raise ValueError("fusedlinear.fuse: split %r; expected one of %s"
                         % (split, ", ".join(SPLITS)))
    if not ops_loaded():
        raise RuntimeError("fusedlinear.fuse: the ops are not loaded: import the installed "
                           "package, or torch.ops.load_library('.../libfusedlinear_ops.so')")
    graph_module = export.symbolic_trace(module)
    graph = _Graph(graph_module, module)
    summary = FusionReport(precision)
    stretches = graph.stretches()
    fused = set()
    for stretch in stretches:
        summary.fused.append((str(stretch.spec), [n.name for n in stretch.nodes]))
        fused.update(stretch.nodes)
    for node in graph.nodes:
        if node.op in CALLS and node not in fused:
            summary.left.append((node.name, export.describe(node, graph.modules).split(" (node")[0],
                                 graph.why_left(node)))
    parts_of = None
    if PRECISIONS[precision] is not None and split == "once":
        parts_of = _parts_split_once(graph_module, graph.state, precision, summary)
        graph_module.register_load_state_dict_post_hook(_refresh_after_load)
    elif PRECISIONS[precision] is not None:
        parts_of = _parts_split_per_call(precision, summary)
    replaced = {}  # a stretch's output -> its op's node, for a stretch taking it as input
    for stretch in stretches:
        source = replaced.get(stretch.source, stretch.source)
        replaced[stretch.nodes[-1]] = _replace(graph.graph, graph.state.keys(), stretch, source,
                                               precision, parts_of)
    graph.graph.lint()
    graph_module.recompile()
    graph_module.fusion_report = summary
    if report:
        print(summary)
    return graph_module
