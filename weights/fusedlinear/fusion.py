"""fuse(module): a torch.fx pass that runs a module's Linear -> pointwise stretches, its MLPs and
its gated and residual blocks as fusedlinear's whole-model op, and leaves the rest as it is.

    fused = fusedlinear.fuse(model)                 # an fx.GraphModule, the same outputs
    fused = fusedlinear.fuse(model, precision="bf16x3", report=True)   # prints what it did
    print(fused.fusion_report)                      # what was fused, what was left and why

A stretch is what the exporter accepts (docs/CHAINS.md): the pass cuts the model's graph into
stretches that start at an nn.Linear's input, hands each to the exporter's recogniser
(export.graph_spec) and replaces each accepted one, the longest first, with one call of
torch.ops.fusedlinear.model on the module's own parameters (get_attr nodes: no copies). The
split precisions split W in the graph, on each call. The fused ops are inference ops: a fused
stretch runs as in eval mode (dropout is the identity) and carries no gradient.
"""
import collections
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
CALLS = ("call_module", "call_function", "call_method")
VOCABULARY = "an nn.Linear or a pointwise op of fusedlinear's vocabulary (docs/CHAINS.md)"


class FusionReport:
    """What fuse did: `fused`, one (spec, [node names]) a stretch, and `left`, one (node name,
    what it is, why it was left) an op that runs as before. str() is a readable summary."""

    def __init__(self, precision):
        self.precision, self.fused, self.left = precision, [], []

    def __str__(self):
        lines = ["fusedlinear.fuse (precision %s): %d stretch%s fused, %d op%s left"
                 % (self.precision, len(self.fused), "" if len(self.fused) == 1 else "es",
                    len(self.left), "" if len(self.left) == 1 else "s")]
        for spec, nodes in self.fused:
            lines.append("  fused %s  (%s)" % (spec, ", ".join(nodes)))
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


def _replace(graph, keys, stretch, source, precision):
    """Replaces the stretch's nodes by one call of the whole-model op on source; returns that
    node."""
    output = stretch.nodes[-1]
    with graph.inserting_before(output):
        weights, biases, params, spec = op_arguments(_ParameterNodes(graph, keys),
                                                     str(stretch.spec))
        split = PRECISIONS[precision]
        operands = []
        for w in weights:
            operands.append(w)
            if split is not None:
                name, count = split
                parts = graph.call_function(getattr(torch.ops.fusedlinear, name), (w,))
                operands += [graph.call_function(operator.getitem, (parts, i))
                             for i in range(count)]
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


def fuse(module, precision="ieee", report=False):
    """An fx.GraphModule computing what `module` computes, each stretch fusedlinear runs (an
    nn.Linear and the pointwise ops after it, an MLP of such layers, a gated pair, a Linear's two
    halves, the input added to the output) replaced by one call of torch.ops.fusedlinear.model
    in `precision` (ieee, tf32, bf16, bf16x3, bf16x6: docs/USAGE.md, "GEMM precision"); the rest
    (normalisations, softmax, attention, a Linear called twice, ...) as it was. Its
    `fusion_report` (a FusionReport) lists both, with the reasons; report=True prints it.

    The module is traced with torch.fx in eval mode (a forward without data-dependent control
    flow); the result shares the module's parameters and submodules. ChainError when it cannot
    be traced; ValueError for an unknown precision; RuntimeError when the ops are not loaded."""
    if precision not in PRECISIONS:
        raise ValueError("fusedlinear.fuse: precision %r; expected one of %s"
                         % (precision, ", ".join(PRECISIONS)))
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
    replaced = {}  # a stretch's output -> its op's node, for a stretch taking it as input
    for stretch in stretches:
        source = replaced.get(stretch.source, stretch.source)
        replaced[stretch.nodes[-1]] = _replace(graph.graph, graph.state.keys(), stretch, source,
                                               precision)
    graph.graph.lint()
    graph_module.recompile()
    graph_module.fusion_report = summary
    if report:
        print(summary)
    return graph_module
