"""Message classes for ``tf.train.Example`` and ``SequenceExample``, without TensorFlow.

The descriptors are built here from Python (no ``protoc`` step) in a private
descriptor pool, so TensorFlow's own ``tensorflow.Example`` can be imported
beside them. Two sets share one file:

- TensorFlow's layout (package ``tensorflow``, the field numbers of TF's
  ``example.proto`` and ``feature.proto``): ``Example``, ``SequenceExample``,
  ``Features``, ``Feature``, ``FeatureList(s)``, ``BytesList``, ``FloatList``,
  ``Int64List``. Records built with them are byte-for-byte what TF reads.
- Views of the same wire format that parsing uses (package ``jdata.views``).
  A map is a repeated message of (key, value) entries on the wire, so a view
  reads each map as a list of ``RawEntry`` with the value left serialized:
  features nobody asked for are never decoded (as TF's parser), and keys are
  ``bytes`` (proto3 would reject records whose keys are not UTF-8, which TF
  reads). ``MergedBatch`` and ``MergedFeatures`` declare a singular field where
  the wire repeats one: protobuf merges repeated occurrences of a singular
  message, so many records or features, each wrapped as one occurrence, parse
  in one call into one message whose repeated fields hold everyone's entries
  or values in order.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto
_ONE, _MANY = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
_SCALARS = {"bytes": _F.TYPE_BYTES, "float": _F.TYPE_FLOAT, "int64": _F.TYPE_INT64}

# message name -> [(field name, number, type (a scalar name or a message), repeated)].
# A message type names one of this file's messages; "tensorflow." ones are TF's.
_TF = "tensorflow."
_VIEWS = "jdata.views."
_MESSAGES = {
    _TF + "BytesList": [("value", 1, "bytes", True)],
    _TF + "FloatList": [("value", 1, "float", True)],
    _TF + "Int64List": [("value", 1, "int64", True)],
    _TF + "Feature": [("bytes_list", 1, _TF + "BytesList", False),
                      ("float_list", 2, _TF + "FloatList", False),
                      ("int64_list", 3, _TF + "Int64List", False)],  # oneof kind, below
    _TF + "Features": [("feature", 1, "map:" + _TF + "Feature", True)],
    _TF + "FeatureList": [("feature", 1, _TF + "Feature", True)],
    _TF + "FeatureLists": [("feature_list", 1, "map:" + _TF + "FeatureList", True)],
    _TF + "Example": [("features", 1, _TF + "Features", False)],
    _TF + "SequenceExample": [("context", 1, _TF + "Features", False),
                              ("feature_lists", 2, _TF + "FeatureLists", False)],
    # Views. A map entry whose value stays serialized.
    _VIEWS + "RawEntry": [("key", 1, "bytes", False), ("value", 2, "bytes", False)],
    _VIEWS + "RawFeatures": [("feature", 1, _VIEWS + "RawEntry", True)],
    _VIEWS + "RawExample": [("features", 1, _VIEWS + "RawFeatures", False)],
    _VIEWS + "RawFeatureLists": [("feature_list", 1, _VIEWS + "RawEntry", True)],
    _VIEWS + "RawSequenceExample": [("context", 1, _VIEWS + "RawFeatures", False),
                                    ("feature_lists", 2, _VIEWS + "RawFeatureLists", False)],
    _VIEWS + "RawFeatureList": [("feature", 1, "bytes", True)],
    # Records wrapped as occurrences of `example` merge into one RawExample.
    _VIEWS + "MergedBatch": [("example", 1, _VIEWS + "RawExample", False)],
    # Features wrapped as occurrences of `feature` merge: the kinds are not a oneof
    # here, so a feature of another kind shows up as a field that is set.
    _VIEWS + "MergedFeature": [("bytes_list", 1, _TF + "BytesList", False),
                               ("float_list", 2, _TF + "FloatList", False),
                               ("int64_list", 3, _TF + "Int64List", False)],
    _VIEWS + "MergedFeatures": [("feature", 1, _VIEWS + "MergedFeature", False)],
}


def _add_field(message, message_name: str, name: str, number: int, kind: str,
               repeated: bool) -> None:
    field = message.field.add(name=name, number=number, label=_MANY if repeated else _ONE)
    if kind in _SCALARS:
        field.type = _SCALARS[kind]
        return
    field.type = _F.TYPE_MESSAGE
    if not kind.startswith("map:"):
        field.type_name = "." + kind
        return
    # A map<string, V> is, on the wire and in a descriptor, a repeated nested entry
    # message marked map_entry.
    entry = message.nested_type.add(name=name.title().replace("_", "") + "Entry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, label=_ONE, type=_F.TYPE_STRING)
    entry.field.add(name="value", number=2, label=_ONE, type=_F.TYPE_MESSAGE,
                    type_name="." + kind.removeprefix("map:"))
    field.type_name = f".{message_name}.{entry.name}"


def _file(package: str, dependency: str | None):
    file = descriptor_pb2.FileDescriptorProto(
        name=f"jdata/{package}.proto", package=package, syntax="proto3",
        dependency=[dependency] if dependency else [])
    for full_name, fields in _MESSAGES.items():
        prefix, name = full_name.rsplit(".", 1)
        if prefix == package:
            message = file.message_type.add(name=name)
            for field in fields:
                _add_field(message, full_name, *field)
            if full_name == _TF + "Feature":  # TF's `oneof kind`
                message.oneof_decl.add(name="kind")
                for field in message.field:
                    field.oneof_index = 0
    return file


def _build() -> dict:
    pool = descriptor_pool.DescriptorPool()
    tf_file = _file("tensorflow", None)
    views_file = _file("jdata.views", tf_file.name)
    classes = {}
    for file in (tf_file, views_file):
        pool.Add(file)
        for message in file.message_type:
            full_name = f"{file.package}.{message.name}"
            classes[message.name] = _message_class(pool.FindMessageTypeByName(full_name))
    return classes


def _message_class(descriptor):
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(descriptor)
    # protobuf < 4.22 (its GetPrototype is gone from 5.x on).
    return message_factory.MessageFactory(descriptor.file.pool).GetPrototype(descriptor)


_CLASSES = _build()
# TensorFlow's messages, to build records with.
BytesList, FloatList, Int64List = (_CLASSES[n] for n in ("BytesList", "FloatList", "Int64List"))
Feature, Features, Example = _CLASSES["Feature"], _CLASSES["Features"], _CLASSES["Example"]
FeatureList, FeatureLists = _CLASSES["FeatureList"], _CLASSES["FeatureLists"]
SequenceExample = _CLASSES["SequenceExample"]
# The views parsing reads them through.
RawExample, RawSequenceExample = _CLASSES["RawExample"], _CLASSES["RawSequenceExample"]
RawFeatureList, MergedBatch = _CLASSES["RawFeatureList"], _CLASSES["MergedBatch"]
MergedFeatures = _CLASSES["MergedFeatures"]
