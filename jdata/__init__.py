"""jdata: input pipelines for JAX, with tf.data's API and explicit-key randomness."""

from jdata._constants import AUTOTUNE as AUTOTUNE
from jdata._constants import INFINITE as INFINITE
from jdata._constants import UNKNOWN as UNKNOWN
from jdata._dataset import Dataset as Dataset
from jdata._declare import declare as declare
from jdata._errors import DataError as DataError
from jdata._errors import DecodeError as DecodeError
from jdata._errors import ImageDecodeError as ImageDecodeError
from jdata._errors import ImageTooLargeError as ImageTooLargeError
from jdata._errors import ElementError as ElementError
from jdata._errors import ServiceError as ServiceError
from jdata._errors import UDFError as UDFError
from jdata import errors as errors
from jdata.errors import JournalError as JournalError
from jdata.errors import MissingExtraError as MissingExtraError
from jdata.errors import OptionsFrozenError as OptionsFrozenError
from jdata.errors import ServiceConnectionError as ServiceConnectionError
from jdata.errors import ServiceNotFoundError as ServiceNotFoundError
from jdata.errors import ServiceStartError as ServiceStartError
from jdata.errors import ServiceStoppedError as ServiceStoppedError
from jdata.errors import ServiceUnavailableError as ServiceUnavailableError
from jdata.errors import ServiceVersionError as ServiceVersionError
from jdata.errors import IteratorClosedError as IteratorClosedError
from jdata.errors import SharedMemoryError as SharedMemoryError
from jdata.errors import UnpicklableJobError as UnpicklableJobError
from jdata.errors import WorkDirInUseError as WorkDirInUseError
from jdata.errors import WorkerError as WorkerError
from jdata.errors import WorkerImportError as WorkerImportError
from jdata._iterator import DatasetIterator as DatasetIterator
from jdata._options import Options as Options
from jdata._options import PlanPins as PlanPins
from jdata._sources import choose_from_datasets as choose_from_datasets
from jdata._sources import counter as counter
from jdata._sources import from_generator as from_generator
from jdata._sources import from_source as from_source
from jdata._sources import from_tensor_slices as from_tensor_slices
from jdata._sources import from_tensors as from_tensors
from jdata._sources import random as random
from jdata._sources import range as range  # noqa: A004
from jdata._sources import sample_from_datasets as sample_from_datasets
from jdata._sources import zip as zip  # noqa: A004
from jdata.io import from_array_record as from_array_record
from jdata.io import from_parquet as from_parquet
from jdata.io import from_text_lines as from_text_lines
from jdata.io import from_tfrecord as from_tfrecord
from jdata.io import list_files as list_files
from jdata.io import load as load
from jdata import hosts as hosts
from jdata._spec import DatasetSpec as DatasetSpec
from jdata._spec import TensorSpec as TensorSpec

__version__ = "0.1.0"


# What ``from jdata import *`` binds: the public names, in the order imported above.
# ``range``, ``zip`` (builtins) and ``random`` (the standard module) are left out, so that
# a star import does not shadow them; they stay ``jdata.range``, ``jdata.zip``, ``jdata.random``.
__all__ = [
    "AUTOTUNE", "INFINITE", "UNKNOWN", "Dataset", "declare", "DataError", "DecodeError",
    "ImageDecodeError", "ImageTooLargeError", "ElementError", "ServiceError", "UDFError",
    "errors", "JournalError", "MissingExtraError",
    "OptionsFrozenError", "ServiceConnectionError", "ServiceNotFoundError",
    "ServiceStartError", "ServiceStoppedError", "ServiceUnavailableError",
    "ServiceVersionError", "IteratorClosedError", "SharedMemoryError", "UnpicklableJobError",
    "WorkDirInUseError", "WorkerError", "WorkerImportError", "DatasetIterator", "Options",
    "PlanPins", "choose_from_datasets", "counter", "from_generator", "from_source", "from_tensor_slices",
    "from_tensors", "sample_from_datasets", "from_array_record", "from_parquet",
    "from_text_lines", "from_tfrecord", "list_files", "load", "hosts", "DatasetSpec",
    "TensorSpec",
]
