// A pickle reader for the data.pkl inside torch.save archives that executes nothing.
//
// It builds a tree of inert values. Only an allow-list of globals means anything: OrderedDict,
// the torch._utils tensor rebuild functions and the torch.*Storage classes (see
// pickle_reader.cpp). Any other class or function is recorded by name and never called, so a
// checkpoint holding, say, an argparse.Namespace still yields its state dict, and a pickled
// nn.Module is reported as "an object of class ...". Tensors are described (storage record,
// offset, sizes, strides), bounds-checked against their storage record, and not materialised.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "modules/loader/zip_reader.h"

namespace fusedlinear {

struct PickleValue {
  enum class Kind {
    kNone,
    kBool,
    kInt,
    kBigInt,  // an int beyond 64 bits (a random seed, say): kept, but without its value
    kFloat,
    kString,
    kBytes,
    kTuple,
    kList,
    kDict,
    kSet,
    kGlobal,   // a class or function named by the pickle: text = "module.name"
    kObject,   // an instance of a class that is not allow-listed: text = its class name
    kStorage,  // text = record key, dtype, integer = number of elements
    kTensor,   // items[0] = storage, integer = storage offset, dims = sizes then strides
  };
  Kind kind = Kind::kNone;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  int64_t integer = 0;
  std::string text;
  // kTuple, kList, kSet: the elements; kDict: key, value, key, value, ... in insertion order
  // (a repeated key appears again; later entries win, as in Python).
  std::vector<PickleValue*> items;
  std::vector<int64_t> dims;
  // kDict: the states BUILD gave it, in order (a kList), or nullptr. An OrderedDict's state is
  // its attributes: a state dict's carries {"_metadata": ...}.
  PickleValue* state = nullptr;

  int64_t tensor_dim() const { return static_cast<int64_t>(dims.size() / 2); }
};

// "a dict", "an int", "an object of class __main__.Net", ... for messages.
std::string describe(const PickleValue& value);

// Owns every value of one unpickling; values point at each other freely (even in cycles).
using PickleArena = std::deque<PickleValue>;

// The size in bytes of storage record `key` (archive/data/<key>); false if there is none.
using RecordLookup = std::function<bool(const std::string& key, uint64_t* size)>;

// Runs the pickle `data[0, size)` and returns its result (owned by `arena`). Throws FormatError.
PickleValue* unpickle(const uint8_t* data, size_t size, const RecordLookup& lookup,
                      PickleArena& arena);

}  // namespace fusedlinear
