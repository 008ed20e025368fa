import enum
import pickle
import struct
from typing import Any

import cloudpickle

from scaler import Client, Serializer


class ObjType(enum.Enum):
    General = b"G"
    Integer = b"I"


class CustomSerializer(Serializer):
    @staticmethod
    def serialize(obj: Any) -> bytes:
        if isinstance(obj, int) and 0 <= obj < 2**32:
            return ObjType.Integer.value + struct.pack("I", obj)

        return ObjType.General.value + cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)

    @staticmethod
    def deserialize(payload: bytes) -> Any:
        obj_type = ObjType(payload[:1])
        payload = payload[1:]

        if obj_type == ObjType.Integer:
            return struct.unpack("I", payload)[0]

        return cloudpickle.loads(payload)


def add(a, b):
    return a + b


with Client(address="tcp://127.0.0.1:2345", serializer=CustomSerializer) as client:
    print(client.submit(add, 1, 2).result())  # 3
