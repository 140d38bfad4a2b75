#include "modules/loader/pickle_reader.h"

#include <cstring>
#include <unordered_map>

namespace fusedlinear {
namespace {

using Kind = PickleValue::Kind;

// Caps that keep a hostile pickle from exhausting memory: every value costs ~100 bytes and
// every opcode makes at most one, so this bounds the arena at about 1 GB.
constexpr size_t kMaxValues = size_t{8} << 20;
constexpr int64_t kMaxTensorDims = 64;
// Names are copied when a value is made from them; these caps keep a name referenced many
// times through the memo from costing its length each time.
constexpr size_t kMaxGlobalName = 1024;
constexpr size_t kMaxStorageKey = 256;

// The storage classes torch.save names in persistent ids, and their element types.
bool storage_dtype(const std::string& name, c10::ScalarType* dtype) {
  static const std::pair<const char*, c10::ScalarType> kTypes[] = {
      {"torch.FloatStorage", c10::ScalarType::Float},
      {"torch.DoubleStorage", c10::ScalarType::Double},
      {"torch.HalfStorage", c10::ScalarType::Half},
      {"torch.BFloat16Storage", c10::ScalarType::BFloat16},
      {"torch.LongStorage", c10::ScalarType::Long},
      {"torch.IntStorage", c10::ScalarType::Int},
      {"torch.ShortStorage", c10::ScalarType::Short},
      {"torch.CharStorage", c10::ScalarType::Char},
      {"torch.ByteStorage", c10::ScalarType::Byte},
      {"torch.BoolStorage", c10::ScalarType::Bool},
      {"torch.ComplexFloatStorage", c10::ScalarType::ComplexFloat},
      {"torch.ComplexDoubleStorage", c10::ScalarType::ComplexDouble},
  };
  for (const auto& [type_name, type] : kTypes) {
    if (name == type_name) {
      *dtype = type;
      return true;
    }
  }
  return false;
}

class Unpickler {
 public:
  Unpickler(const uint8_t* data, size_t size, const RecordLookup& lookup, PickleArena& arena)
      : data_(data), size_(size), lookup_(lookup), arena_(arena) {}

  PickleValue* run();

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw FormatError("pickle: " + what + " (at byte " + std::to_string(op_pos_) + ")");
  }

  // --- reading the opcode stream
  const uint8_t* take(uint64_t n) {
    if (n > size_ - pos_) fail("truncated");
    const uint8_t* p = data_ + pos_;
    pos_ += n;
    return p;
  }
  uint64_t read_le(int bytes) {
    const uint8_t* p = take(bytes);
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
    return v;
  }
  std::string read_string(uint64_t n) {
    const uint8_t* p = take(n);  // checked against the bytes left before anything is allocated
    return std::string(reinterpret_cast<const char*>(p), n);
  }
  std::string read_line() {
    const uint8_t* start = data_ + pos_;
    const void* nl = std::memchr(start, '\n', size_ - pos_);
    if (!nl) fail("truncated (unterminated line)");
    const size_t n = static_cast<const uint8_t*>(nl) - start;
    pos_ += n + 1;
    return std::string(reinterpret_cast<const char*>(start), n);
  }

  // --- values and the stack
  PickleValue* make(Kind kind) {
    if (arena_.size() >= kMaxValues) fail("too many objects");
    arena_.emplace_back();
    arena_.back().kind = kind;
    return &arena_.back();
  }
  PickleValue* make_int(int64_t v) {
    PickleValue* value = make(Kind::kInt);
    value->integer = v;
    return value;
  }
  PickleValue* make_string(Kind kind, std::string text) {
    PickleValue* value = make(kind);
    value->text = std::move(text);
    return value;
  }
  size_t fence() const { return marks_.empty() ? 0 : marks_.back(); }
  void push(PickleValue* value) { stack_.push_back(value); }
  PickleValue* pop() {
    if (stack_.size() <= fence()) fail("stack underflow");
    PickleValue* value = stack_.back();
    stack_.pop_back();
    return value;
  }
  PickleValue* top() {
    if (stack_.size() <= fence()) fail("stack underflow");
    return stack_.back();
  }
  // The values above the last MARK, which is removed.
  std::vector<PickleValue*> pop_mark() {
    if (marks_.empty()) fail("no MARK");
    const size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<PickleValue*> items(stack_.begin() + mark, stack_.end());
    stack_.resize(mark);
    return items;
  }
  void memo_put(uint64_t index) { memo_[index] = top(); }
  PickleValue* memo_get(uint64_t index) {
    const auto it = memo_.find(index);
    if (it == memo_.end()) fail("memo entry " + std::to_string(index) + " missing");
    return it->second;
  }

  // --- what the opcodes do
  void add_items(PickleValue* target, const std::vector<PickleValue*>& items, bool pairs);
  PickleValue* global(const std::string& module, const std::string& name);
  PickleValue* call(PickleValue* callable, PickleValue* args);
  PickleValue* persistent_load(PickleValue* pid);
  PickleValue* rebuild_tensor(const std::vector<PickleValue*>& args);
  int64_t to_int(const PickleValue* value, const char* what) {
    if (value->kind != Kind::kInt) fail(std::string(what) + " is " + describe(*value));
    return value->integer;
  }

  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  size_t op_pos_ = 0;
  size_t total_dims_ = 0;
  const RecordLookup& lookup_;
  PickleArena& arena_;
  std::vector<PickleValue*> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, PickleValue*> memo_;
};

void Unpickler::add_items(PickleValue* target, const std::vector<PickleValue*>& items, bool pairs) {
  if (pairs && items.size() % 2 != 0) fail("odd number of items for SETITEMS");
  const bool fits = pairs ? target->kind == Kind::kDict
                          : (target->kind == Kind::kList || target->kind == Kind::kSet);
  if (fits) {
    target->items.insert(target->items.end(), items.begin(), items.end());
  } else if (target->kind != Kind::kObject) {
    // An instance of an unknown class (a dict or list subclass, say defaultdict) takes items
    // like Python would, and keeps them nowhere: nothing of it is ever used.
    fail(std::string(pairs ? "setting items of " : "appending to ") + describe(*target));
  }
}

PickleValue* Unpickler::global(const std::string& module, const std::string& name) {
  if (module.size() + name.size() > kMaxGlobalName) fail("class or function name too long");
  return make_string(Kind::kGlobal, module + "." + name);
}

// REDUCE: only allow-listed callables do anything; any other call yields an inert object
// that remembers the callable's name.
PickleValue* Unpickler::call(PickleValue* callable, PickleValue* args) {
  if (callable->kind != Kind::kGlobal) fail("calling " + describe(*callable));
  if (args->kind != Kind::kTuple) fail("call arguments are " + describe(*args));
  const std::string& name = callable->text;
  const std::vector<PickleValue*>& a = args->items;
  if (name == "collections.OrderedDict") {
    if (!a.empty()) fail("OrderedDict called with arguments");
    return make(Kind::kDict);
  }
  if (name == "torch._utils._rebuild_tensor_v2" || name == "torch._utils._rebuild_tensor") {
    return rebuild_tensor(a);
  }
  if (name == "torch._utils._rebuild_parameter" ||
      name == "torch._utils._rebuild_parameter_with_state") {
    // (data, requires_grad, backward_hooks[, state]): the parameter is its data.
    if (a.size() < 3 || a.size() > 4 || a[0]->kind != Kind::kTensor) fail("bad " + name + " call");
    return a[0];
  }
  if (name == "torch._tensor._rebuild_from_type_v2") {
    // (func, type, args, state): a plain tensor or parameter rebuilt by one of the above.
    if (a.size() != 4 || a[0]->kind != Kind::kGlobal || a[0]->text == name ||
        a[1]->kind != Kind::kGlobal ||
        (a[1]->text != "torch.Tensor" && a[1]->text != "torch.nn.parameter.Parameter")) {
      fail("unsupported tensor subclass in " + name);
    }
    PickleValue* result = call(a[0], a[2]);
    if (result->kind != Kind::kTensor) fail("bad " + name + " call");
    return result;
  }
  if (name == "torch.jit._pickle.restore_type_tag") {
    // libtorch's pickler (torch::pickle_save) tags containers with their TorchScript type.
    if (a.size() != 2) fail("bad " + name + " call");
    return a[0];
  }
  return make_string(Kind::kObject, name);
}

// ('storage', torch.<Type>Storage, key, location, numel): the record archive/data/<key>.
// The location (e.g. "cuda:0") is ignored: everything is read to the CPU.
PickleValue* Unpickler::persistent_load(PickleValue* pid) {
  if (pid->kind != Kind::kTuple || pid->items.size() != 5 || pid->items[0]->kind != Kind::kString ||
      pid->items[0]->text != "storage") {
    fail("unsupported persistent id (" + describe(*pid) + ")");
  }
  const PickleValue* type = pid->items[1];
  const PickleValue* key = pid->items[2];
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  if (type->kind != Kind::kGlobal || !storage_dtype(type->text, &dtype)) {
    fail("unsupported storage type " +
         (type->kind == Kind::kGlobal ? printable(type->text) : describe(*type)));
  }
  if (key->kind != Kind::kString || key->text.size() > kMaxStorageKey) {
    fail("bad storage key (" + describe(*key) + ")");
  }
  const int64_t numel = to_int(pid->items[4], "storage size");
  uint64_t record_size = 0;
  if (!lookup_(key->text, &record_size)) {
    fail("storage record data/" + printable(key->text) + " is missing");
  }
  const uint64_t element_size = c10::elementSize(dtype);
  if (numel < 0 || static_cast<uint64_t>(numel) > record_size / element_size) {
    fail("storage data/" + printable(key->text) + " claims " + std::to_string(numel) +
         " elements but its record holds " + std::to_string(record_size) + " bytes");
  }
  PickleValue* storage = make_string(Kind::kStorage, key->text);
  storage->dtype = dtype;
  storage->integer = numel;
  return storage;
}

// _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, backward_hooks[, metadata])
// and the older _rebuild_tensor(storage, offset, size, stride). Every element the view can
// reach must lie inside the storage.
PickleValue* Unpickler::rebuild_tensor(const std::vector<PickleValue*>& args) {
  if (args.size() != 4 && args.size() != 6 && args.size() != 7) fail("bad tensor rebuild call");
  PickleValue* storage = args[0];
  if (storage->kind != Kind::kStorage) fail("tensor storage is " + describe(*storage));
  const int64_t offset = to_int(args[1], "tensor storage offset");
  const PickleValue* sizes = args[2];
  const PickleValue* strides = args[3];
  if (sizes->kind != Kind::kTuple || strides->kind != Kind::kTuple ||
      sizes->items.size() != strides->items.size()) {
    fail("tensor sizes and strides are not tuples of one length");
  }
  if (static_cast<int64_t>(sizes->items.size()) > kMaxTensorDims) fail("too many tensor dims");
  PickleValue* tensor = make(Kind::kTensor);
  tensor->items.push_back(storage);
  tensor->integer = offset;
  tensor->dtype = storage->dtype;
  bool empty = false;
  int64_t last = offset;  // the largest element index the view reaches
  // Sizes and strides cost pickle bytes each, unless a hostile file reuses one tuple through
  // the memo: then they could cost far more memory than the file has bytes.
  total_dims_ += 2 * sizes->items.size();
  if (total_dims_ > size_) fail("more tensor dimensions than the pickle has bytes");
  for (const PickleValue* size : sizes->items) tensor->dims.push_back(to_int(size, "tensor size"));
  for (size_t i = 0; i < strides->items.size(); ++i) {
    const int64_t size = tensor->dims[i];
    const int64_t stride = to_int(strides->items[i], "tensor stride");
    tensor->dims.push_back(stride);
    if (size < 0 || stride < 0) fail("negative tensor size or stride");
    if (size == 0) empty = true;
    int64_t reach = 0;
    if (size > 0 && (__builtin_mul_overflow(size - 1, stride, &reach) ||
                     __builtin_add_overflow(last, reach, &last))) {
      fail("tensor extent overflows");
    }
  }
  if (offset < 0 || offset > storage->integer || (!empty && last >= storage->integer)) {
    fail("tensor view (offset " + std::to_string(offset) + ", reaching element " +
         std::to_string(last) + ") exceeds its storage of " + std::to_string(storage->integer) +
         " elements");
  }
  // The element count must fit in int64 too (sizes of a view that stays in bounds can still
  // multiply past it when strides are 0).
  int64_t numel = 1;
  for (int64_t i = 0; i < tensor->tensor_dim(); ++i) {
    if (__builtin_mul_overflow(numel, tensor->dims[i], &numel)) fail("tensor size overflows");
  }
  return tensor;
}

PickleValue* Unpickler::run() {
  PickleValue* none = make(Kind::kNone);
  while (true) {
    op_pos_ = pos_;
    const uint8_t op = *take(1);
    switch (op) {
      case 0x80: {  // PROTO
        const uint8_t version = *take(1);
        if (version > 5) fail("unsupported pickle protocol " + std::to_string(version));
        break;
      }
      case 0x95:  // FRAME: a length hint only
        take(8);
        break;
      case '.':  // STOP
        return pop();

      // --- constants and numbers
      case 'N':
        push(none);
        break;
      case 0x88:
      case 0x89: {  // NEWTRUE, NEWFALSE
        PickleValue* value = make(Kind::kBool);
        value->integer = op == 0x88;
        push(value);
        break;
      }
      case 'J':  // BININT
        push(make_int(static_cast<int32_t>(read_le(4))));
        break;
      case 'K':  // BININT1
        push(make_int(static_cast<int64_t>(read_le(1))));
        break;
      case 'M':  // BININT2
        push(make_int(static_cast<int64_t>(read_le(2))));
        break;
      case 0x8a:    // LONG1
      case 0x8b: {  // LONG4
        const uint64_t n = read_le(op == 0x8a ? 1 : 4);
        if (n > 8) {
          take(n);
          push(make(Kind::kBigInt));
          break;
        }
        const uint64_t bits = read_le(static_cast<int>(n));
        int64_t v = 0;
        if (n == 8) {
          std::memcpy(&v, &bits, 8);
        } else if (n > 0) {  // sign-extend from n bytes
          const uint64_t sign = uint64_t{1} << (8 * n - 1);
          v = static_cast<int64_t>(bits & (sign - 1)) - static_cast<int64_t>(bits & sign);
        }
        push(make_int(v));
        break;
      }
      case 'G': {  // BINFLOAT: big-endian double
        const uint8_t* p = take(8);
        uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = (bits << 8) | p[i];
        PickleValue* value = make(Kind::kFloat);
        std::memcpy(&value->integer, &bits, 8);  // the bits; no float is ever used
        push(value);
        break;
      }

      // --- strings and bytes
      case 'X':  // BINUNICODE
        push(make_string(Kind::kString, read_string(read_le(4))));
        break;
      case 0x8c:  // SHORT_BINUNICODE
        push(make_string(Kind::kString, read_string(read_le(1))));
        break;
      case 0x8d:  // BINUNICODE8
        push(make_string(Kind::kString, read_string(read_le(8))));
        break;
      case 'T':  // BINSTRING (Python 2 str)
        push(make_string(Kind::kString, read_string(static_cast<uint32_t>(read_le(4)))));
        break;
      case 'U':  // SHORT_BINSTRING
        push(make_string(Kind::kString, read_string(read_le(1))));
        break;
      case 'B':  // BINBYTES
        push(make_string(Kind::kBytes, read_string(read_le(4))));
        break;
      case 'C':  // SHORT_BINBYTES
        push(make_string(Kind::kBytes, read_string(read_le(1))));
        break;
      case 0x8e:  // BINBYTES8
      case 0x96:  // BYTEARRAY8
        push(make_string(Kind::kBytes, read_string(read_le(8))));
        break;

      // --- containers
      case '}':
        push(make(Kind::kDict));
        break;
      case ']':
        push(make(Kind::kList));
        break;
      case ')':
        push(make(Kind::kTuple));
        break;
      case 0x8f:
        push(make(Kind::kSet));
        break;
      case 0x85:
      case 0x86:
      case 0x87: {  // TUPLE1, TUPLE2, TUPLE3
        const size_t n = op - 0x84;
        PickleValue* tuple = make(Kind::kTuple);
        tuple->items.resize(n);
        for (size_t i = n; i-- > 0;) tuple->items[i] = pop();
        push(tuple);
        break;
      }
      case '(':  // MARK
        marks_.push_back(stack_.size());
        break;
      case 't':     // TUPLE
      case 'l':     // LIST
      case 0x91: {  // FROZENSET
        PickleValue* value = make(op == 't' ? Kind::kTuple : op == 'l' ? Kind::kList : Kind::kSet);
        value->items = pop_mark();
        push(value);
        break;
      }
      case 'd': {  // DICT
        PickleValue* dict = make(Kind::kDict);
        std::vector<PickleValue*> items = pop_mark();
        add_items(dict, items, /*pairs=*/true);
        push(dict);
        break;
      }
      case 'a': {  // APPEND
        PickleValue* item = pop();
        add_items(top(), {item}, /*pairs=*/false);
        break;
      }
      case 'e':     // APPENDS
      case 0x90: {  // ADDITEMS
        std::vector<PickleValue*> items = pop_mark();
        add_items(top(), items, /*pairs=*/false);
        break;
      }
      case 's': {  // SETITEM
        PickleValue* value = pop();
        PickleValue* key = pop();
        add_items(top(), {key, value}, /*pairs=*/true);
        break;
      }
      case 'u': {  // SETITEMS
        std::vector<PickleValue*> items = pop_mark();
        add_items(top(), items, /*pairs=*/true);
        break;
      }

      // --- stack and memo
      case '0':  // POP
        pop();
        break;
      case '1':  // POP_MARK
        pop_mark();
        break;
      case '2':  // DUP
        push(top());
        break;
      case 'q':  // BINPUT
        memo_put(read_le(1));
        break;
      case 'r':  // LONG_BINPUT
        memo_put(read_le(4));
        break;
      case 0x94:  // MEMOIZE
        memo_put(memo_.size());
        break;
      case 'h':  // BINGET
        push(memo_get(read_le(1)));
        break;
      case 'j':  // LONG_BINGET
        push(memo_get(read_le(4)));
        break;

      // --- objects: named, never imported or run
      case 'c': {  // GLOBAL
        std::string module = read_line();
        std::string name = read_line();
        push(global(module, name));
        break;
      }
      case 0x93: {  // STACK_GLOBAL
        PickleValue* name = pop();
        PickleValue* module = pop();
        if (module->kind != Kind::kString || name->kind != Kind::kString) {
          fail("STACK_GLOBAL of non-strings");
        }
        push(global(module->text, name->text));
        break;
      }
      case 'R': {  // REDUCE
        PickleValue* args = pop();
        PickleValue* callable = pop();
        push(call(callable, args));
        break;
      }
      case 0x81:    // NEWOBJ: cls, args
      case 0x92: {  // NEWOBJ_EX: cls, args, kwargs
        if (op == 0x92) pop();
        pop();
        PickleValue* cls = pop();
        if (cls->kind != Kind::kGlobal) fail("NEWOBJ of " + describe(*cls));
        push(cls->text == "collections.OrderedDict" ? make(Kind::kDict)
                                                    : make_string(Kind::kObject, cls->text));
        break;
      }
      case 'b': {  // BUILD: a dict keeps its states (an OrderedDict's _metadata); others not
        PickleValue* state = pop();
        PickleValue* target = top();
        const Kind kind = target->kind;
        if (kind != Kind::kDict && kind != Kind::kObject && kind != Kind::kTensor) {
          fail("setting the state of " + describe(*target));
        }
        if (kind == Kind::kDict) {
          // One list per dict, one entry per BUILD: repeated BUILDs cost what their opcodes do.
          if (!target->state) target->state = make(Kind::kList);
          target->state->items.push_back(state);
        }
        break;
      }
      case 'Q':  // BINPERSID
        push(persistent_load(pop()));
        break;

      default:
        fail("unsupported pickle opcode 0x" + std::string(1, "0123456789abcdef"[op >> 4]) +
             "0123456789abcdef"[op & 15]);
    }
  }
}

}  // namespace

std::string describe(const PickleValue& value) {
  switch (value.kind) {
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return "a bool";
    case Kind::kInt:
      return "an int";
    case Kind::kBigInt:
      return "an int over 64 bits";
    case Kind::kFloat:
      return "a float";
    case Kind::kString:
      return "a string";
    case Kind::kBytes:
      return "bytes";
    case Kind::kTuple:
      return "a tuple";
    case Kind::kList:
      return "a list";
    case Kind::kDict:
      return "a dict";
    case Kind::kSet:
      return "a set";
    case Kind::kGlobal:
      return "the class or function " + printable(value.text);
    case Kind::kObject:
      return "an object of class " + printable(value.text);
    case Kind::kStorage:
      return "a storage";
    case Kind::kTensor:
      return "a tensor";
  }
  return "an unknown value";
}

PickleValue* unpickle(const uint8_t* data, size_t size, const RecordLookup& lookup,
                      PickleArena& arena) {
  return Unpickler(data, size, lookup, arena).run();
}

}  // namespace fusedlinear
