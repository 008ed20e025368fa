"""The client library: submit tasks, maps, graphs and objects to a Scaler scheduler."""

from scaler.client.actors import ActorHandle
from scaler.client.client import Client
from scaler.client.future import ProfilingInfo, ScalerFuture
from scaler.client.objects import ObjectReference
from scaler.serializer import Serializer

__all__ = ["ActorHandle", "Client", "ObjectReference", "ProfilingInfo", "ScalerFuture", "Serializer"]
