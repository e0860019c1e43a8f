"""The fleet file: several services (scenarios) that share GPU inventory, commitments and rules.

A fleet file lists its services (scenario files, or scenarios written inline) and the GPU types
they share: committed GPUs (owned or reserved, paid whether used or not, each with its price),
a cap on GPUs bought on demand beyond them, and one on-demand price per shared type. It may add
fleet-wide rules (a most number of GPU types, a monthly budget) and a forecast whose quarters
run over the whole fleet. `planner solve FLEET.yaml` plans every service in one ILP
(planner.fleet_plan); each service keeps its own split decision, levers and targets.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator

from planner.bounds import (
    MAX_FLEET_GPUS,
    MAX_PRICE_USD_PER_GPU_HOUR,
    GpuCount,
    PriceUsdPerGpuHour,
    real,
    whole,
)
from planner.catalog import Catalog, load_catalog
from planner.errors import InputError, did_you_mean, shorten
from planner.files import missing_text, path_is
from planner.inputs import Inputs, scenario_inputs
from planner.scenario import (
    Forecast,
    GPUCandidate,
    Scenario,
    Solver,
    is_fleet_document,
    resolve,
    scenario_from_document,
)
from planner.scenario.fields import OutputName, Strict
from planner.yamlio import load_yaml, validate


class SharedGPU(Strict):
    """One GPU type the services share: what is committed, what may be bought, at what price."""

    owned: GpuCount = Field(0, description="GPUs owned: paid whether used or not (amortisation, power, hosting)")
    owned_usd_per_hour: real(ge=0, le=MAX_PRICE_USD_PER_GPU_HOUR) | None = Field(None, description="cost of an owned GPU per hour")
    reserved: GpuCount = Field(0, description="GPUs reserved (committed): paid whether used or not")
    reserved_usd_per_hour: real(ge=0, le=MAX_PRICE_USD_PER_GPU_HOUR) | None = Field(None, description="committed price per GPU-hour")
    max_new: GpuCount | None = Field(
        None, description="most GPUs bought on demand beyond the owned and reserved ones [default: no cap]"
    )
    price_usd_per_hour: PriceUsdPerGpuHour | None = Field(
        None, description="on-demand price per GPU-hour, the same for every service [default: the catalog's]"
    )

    @model_validator(mode="after")
    def _priced(self) -> SharedGPU:
        for kind in ("owned", "reserved"):
            if getattr(self, kind) and getattr(self, f"{kind}_usd_per_hour") is None:
                raise ValueError(f"{kind}: {getattr(self, kind)} GPUs need {kind}_usd_per_hour (what one costs an hour)")
            # A price of no GPUs prices nothing: the type's GPUs would all run on demand, at its on-demand price.
            if not getattr(self, kind) and getattr(self, f"{kind}_usd_per_hour") is not None:
                later = ("; the price of commitments a forecast makes is forecast.reserved_prices"
                         if kind == "reserved" else "")
                raise ValueError(f"{kind}_usd_per_hour: a price for no {kind} GPUs would price nothing; state "
                                 f"{kind}: N, the GPUs it prices{later}")
        if self.committed + (self.max_new or 0) > MAX_FLEET_GPUS:
            raise ValueError(f"owned + reserved + max_new = {self.committed + (self.max_new or 0):,} GPUs, more than "
                             f"a fleet may hold ({MAX_FLEET_GPUS:,})")
        return self

    @property
    def committed(self) -> int:
        return self.owned + self.reserved

    @property
    def committed_usd_per_hour(self) -> float:
        """All committed GPUs of the type, per hour (paid whether used or not)."""
        return self.owned * (self.owned_usd_per_hour or 0.0) + self.reserved * (self.reserved_usd_per_hour or 0.0)

    @property
    def cap(self) -> int | None:
        """Most GPUs of the type the fleet can run: committed plus the purchase cap (None: no cap)."""
        return None if self.max_new is None else self.committed + self.max_new


class FleetSpec(Strict):
    name: OutputName
    description: str = ""
    services: list[str | dict[str, Any]] = Field(
        min_length=1, description="each a scenario file (relative to the fleet file) or a scenario written inline"
    )
    inventory: dict[str, SharedGPU] = Field(default_factory=dict, description="GPU types the services share")
    max_gpu_types: whole(ge=1, le=MAX_FLEET_GPUS) | None = Field(
        None, description="most GPU types the whole fleet may run (fewer types: fewer images, drivers, spares)"
    )
    budget_usd_per_month: real(ge=1, le=1e15) | None = Field(
        None, description="the fleet's budget: a plan above it exits 3 (infeasible), naming the overrun"
    )
    solver: Solver = Field(Solver(), description="solves the fleet's ILP and every service's re-solves")
    forecast: Forecast | None = Field(None, description="quarters over the whole fleet (planner forecast)")

    @field_validator("inventory")
    @classmethod
    def _within_a_fleet(cls, inventory: dict[str, SharedGPU]) -> dict[str, SharedGPU]:
        """The bound on a fleet's GPUs holds across its types, not only within each."""
        total = sum(t.committed + (t.max_new or 0) for t in inventory.values())
        if total > MAX_FLEET_GPUS:
            raise ValueError(f"owned + reserved + max_new over every type = {total:,} GPUs, more than a fleet may "
                             f"hold ({MAX_FLEET_GPUS:,})")
        return inventory


@dataclass(frozen=True)
class Service:
    """One service of a fleet: its scenario's inputs, with the fleet's prices for shared GPU types."""

    index: int
    inputs: Inputs
    where: str  # how messages name it: a file, or 'fleet.yaml: services[2]'

    @property
    def name(self) -> str:
        return self.inputs.scenario.name


@dataclass(frozen=True)
class FleetInputs:
    path: Path
    spec: FleetSpec
    catalog: Catalog  # the base catalog (shared GPU types are checked against it)
    services: tuple[Service, ...]  # with the fleet's prices for shared types
    stated: tuple[Service, ...] = ()  # as their scenarios state them

    def with_inventory(self, inventory: dict[str, SharedGPU]) -> FleetInputs:
        """The same services with another inventory (a forecast quarter's commitments and prices): the
        quarter's price of a type is the fleet's, over what a service states (checked against the
        fleet's own when it was loaded), a type a service defines in its catalog overrides included."""
        spec = self.spec.model_copy(update={"inventory": inventory})
        return _with_shared_prices(FleetInputs(self.path, spec, self.catalog, self.stated, self.stated), check=False)

    @property
    def shared_caps(self) -> dict[str, int]:
        return {g: s.cap for g, s in self.spec.inventory.items() if s.cap is not None}

    @property
    def commitments(self) -> dict[str, tuple[int, float]]:
        """Committed GPUs per shared type and their mean price per GPU-hour (for the ILP)."""
        return {g: (s.committed, s.committed_usd_per_hour / s.committed)
                for g, s in self.spec.inventory.items() if s.committed}

    def on_demand_price(self, gpu: str) -> float:
        """The fleet's on-demand $/GPU-hour of a type: for a type of the inventory, the price it states,
        else the catalog's (a service that states another is refused: _with_shared_prices); for a
        type only services run, the one they state (load_fleet checks that they agree; a type a
        service defines in its catalog overrides has no other), which a forecast quarter's inventory
        must keep; else the catalog's."""
        shared = self.spec.inventory.get(gpu)
        if shared is not None:
            return self.catalog.gpu(gpu).price_usd_per_hour if shared.price_usd_per_hour is None else shared.price_usd_per_hour
        for svc in self.stated:
            for cand in svc.inputs.scenario.gpu_candidates:
                if cand.id == gpu:
                    return cand.price_per_hour(svc.inputs.catalog.gpu(gpu).price_usd_per_hour)
        return self.catalog.gpu(gpu).price_usd_per_hour


def is_fleet_file(path: str | Path) -> bool:
    return is_fleet_document(load_yaml(path))


def load_fleet(path: str | Path, *, catalog_files: tuple[str, ...] = ()) -> FleetInputs:
    """Read and validate a fleet file and every service it lists."""
    path = Path(path)
    raw = load_yaml(path)
    if not isinstance(raw, dict):
        raise InputError("a fleet file is a YAML mapping (name:, services:, inventory:, ...)", where=str(path))
    spec = validate(FleetSpec, raw, where=str(path))
    catalog = load_catalog(*catalog_files)
    for gpu in spec.inventory:
        try:
            catalog.gpu(gpu)
        except InputError as exc:
            # the fleet prices and caps a shared type as one piece of hardware: its own catalog must know it
            # (said before any service's logs are read, so a typo is not hidden behind them)
            defining = _overriding_services(spec, path, gpu)
            if defining:
                raise InputError(f"inventory.{gpu}: '{gpu}' is defined only in the catalog overrides of service "
                                 f"'{defining[0]}'; a type the fleet shares must be known to the fleet: define it in "
                                 "a catalog file and give it with --catalog", where=str(path)) from None
            raise InputError(f"inventory.{gpu}: {exc}", where=str(path)) from None
    services = []
    for i, entry in enumerate(spec.services):
        services.append(_service(spec, catalog, path, i, entry, catalog_files))
    # Compared without case: a service's name starts its figures' file names, which a case-insensitive
    # file system (macOS, Windows) would merge.
    names = [s.name.casefold() for s in services]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise InputError(f"services[{i}]: a second service named '{services[i].name}' (service names name report "
                             "sections and figure files, compared without case)", where=str(path))
    # The joint ILP's rows and columns start with the service's name, written as an .lp file allows
    # (every character but letters and digits becomes '_'): 'x-y' and 'x_y' would name the same rows
    # ('A-b' and 'a_b' do not: the names keep their case).
    from planner.ilp_solver import lp_name_clash

    clash = lp_name_clash([s.name for s in services])
    if clash is not None:
        j, i = clash
        raise InputError(f"services[{i}]: '{services[i].name}' and '{services[j].name}' differ only in '-', '_' or '.', "
                         "which the ILP's names (and its .lp file) cannot tell apart: rename one", where=str(path))
    for svc in services:
        if svc.inputs.scenario.forecast is not None:
            raise InputError("forecast: a service of a fleet has no forecast of its own (it would be ignored); state "
                             "the quarters in the fleet's forecast section", where=svc.where)
        if spec.forecast is not None and svc.inputs.scenario.autoscaling.reserved_discount is not None:
            # the fleet's forecast commits the service's GPUs at its own terms: a second discount priced its day otherwise
            raise InputError("autoscaling.reserved_discount: reserved terms are given once, and this fleet's forecast "
                             "gives them (forecast.reserved_discount, reserved_prices), for the day of every service "
                             "too; drop it here", where=svc.where)
        _refuse_own_solver(svc, spec.solver)
    run = {c.id for svc in services for c in svc.inputs.scenario.gpu_candidates}
    # The fleet's rows name GPU types too (its inventory's, and those its services run): one service's
    # h100_sxm beside another's h100-sxm took one name, and PuLP refused the model with a traceback.
    gpus = sorted(run | set(spec.inventory))
    clash = lp_name_clash(gpus)
    if clash is not None:
        j, i = clash
        raise InputError(f"GPU types '{gpus[j]}' and '{gpus[i]}' (of the services' `gpus` and the inventory) differ "
                         "only in characters the ILP's names (and its .lp file) do not keep ('-', '_', '.', spaces): "
                         "rename one in its catalog", where=str(path))
    for gpu, shared in spec.inventory.items():
        # (committed GPUs no service runs are paid all the same: the plan shows them idle)
        if gpu not in run and not shared.committed:
            raise InputError(f"inventory.{gpu}: no service may run {gpu} and none is owned or reserved, so this would "
                             "change nothing; add it to a service's gpus or drop it", where=str(path))
    _one_definition_per_gpu(services, spec.inventory)
    if spec.forecast is not None:
        _check_forecast(spec.forecast, catalog, services, spec.inventory, path)
    return _with_shared_prices(FleetInputs(path, spec, catalog, tuple(services), tuple(services)))


def _overriding_services(spec: FleetSpec, path: Path, gpu: str) -> list[str]:
    """The names of the services whose catalog overrides define GPU type `gpu` (read from their
    documents alone, before their traffic is loaded; a file that cannot be read is left to _service)."""
    names = []
    for entry in spec.services:
        doc = entry
        if isinstance(entry, str):
            with contextlib.suppress(InputError, OSError):
                doc = load_yaml(resolve(path.parent, entry))
        gpus = doc.get("catalog", {}).get("gpus") if isinstance(doc, dict) and isinstance(doc.get("catalog"), dict) else None
        if isinstance(gpus, dict) and gpu in gpus:
            names.append(str(doc.get("name")))
    return names


def _refuse_own_solver(svc: Service, fleet_solver: Solver) -> None:
    """A service's own solver settings, where they differ from the fleet's, which solves every
    service (one ILP, and each service's re-solves): they would be ignored without a word."""
    own = svc.inputs.scenario.solver
    stated = own.model_fields_set if "solver" in svc.inputs.scenario.model_fields_set else set()
    differ = [f for f in type(own).model_fields if f in stated and getattr(own, f) != getattr(fleet_solver, f)]
    if differ:
        raise InputError(f"solver: a fleet's services are solved by the fleet's solver ({_solver_text(fleet_solver)}), "
                         f"so this service's ({_solver_text(own, differ)}) would be ignored; state it in the fleet file",
                         where=svc.where)


def _solver_text(solver: Solver, fields=("backend", "time_limit_s")) -> str:
    words = {"backend": solver.backend, "time_limit_s": f"time limit {solver.time_limit_s:g} s"}
    return ", ".join(words[f] for f in fields)


def refuse_mixed_verify(services: Sequence[Service]) -> None:
    """Services that disagree on `verify`, where no command-line flag settles it: certification
    replays every pool of the fleet together (a pool that misses re-solves the whole fleet's ILP),
    so it is all of them or none. `planner solve` and `planner forecast` both take --verify /
    --no-verify, which the refusal names."""
    first = services[0]
    for svc in services[1:]:
        if svc.inputs.scenario.verify != first.inputs.scenario.verify:
            raise InputError(f"verify: {str(svc.inputs.scenario.verify).lower()} here and "
                             f"{str(first.inputs.scenario.verify).lower()} for '{first.name}': a fleet's services are "
                             "certified together (a pool that misses re-solves the whole fleet), so they state verify "
                             "alike (or --verify or --no-verify settles it for all)",
                             where=svc.where)


def _check_forecast(fc: Forecast, catalog: Catalog, services: list[Service], inventory, path: Path) -> None:
    """The fleet's forecast section, refused where it names a GPU type nobody may run, or a context
    limit, when the fleet is read: `planner solve` on the fleet does not run the quarters, and would
    otherwise take a section that `planner forecast` refuses."""
    run = {c.id for svc in services for c in svc.inputs.scenario.gpu_candidates}
    used = set(inventory) | run
    if not fc.reserved_pools:
        raise InputError("forecast.reserved_pools: false would be ignored: in a fleet a class may always keep a pool "
                         "of its own on a committed type (the fleet's ILP and each service's re-solves), so that "
                         "commitments are never stranded; drop it", where=str(path))
    for gpu in fc.reserved_prices:  # (a scenario refuses such a price in its schema, against its gpus)
        if gpu not in used:
            missing = did_you_mean(gpu, used, what="GPU", among="the services' gpus and the inventory")
            raise InputError(f"forecast.reserved_prices: {missing} (a committed price needs the GPU among them)",
                             where=str(path))
        if gpu not in run:  # the forecast commits only what services run: no commitment would take this price
            raise InputError(f"forecast.reserved_prices.{gpu}: no service may run {gpu}, so the forecast commits none "
                             "and this would change nothing; add it to a service's gpus or drop it", where=str(path))
    for i, q in enumerate(fc.quarters):
        where = f"forecast.quarters[{i}]"
        if q.context_limit is not None:
            raise InputError(f"{where}.context_limit: a fleet's quarters change demand, prices, availability and "
                             "commitments; a context limit belongs to each service's scenario", where=str(path))
        for gpu in q.reserved:
            if gpu not in run:  # as a scenario's quarter refuses it: commitments no service can use, idle from the start
                try:
                    catalog.gpu(gpu)
                except InputError as exc:
                    raise InputError(f"{where}.reserved: {exc}", where=str(path)) from None
                raise InputError(f"{where}.reserved.{gpu}: no service may run {gpu}, so these GPUs would be paid for "
                                 "and stand idle; add it to a service's gpus or drop it", where=str(path))
        for field_name in ("prices", "availability"):
            for gpu in getattr(q, field_name):
                if gpu in run:  # (a service may define its own type in its catalog overrides)
                    continue
                if gpu in used:  # the inventory's GPUs of a type nobody runs stand idle whatever it costs or caps
                    raise InputError(f"{where}.{field_name}.{gpu}: no service may run {gpu} (the inventory's stand "
                                     "idle), so this would change nothing; add it to a service's gpus or drop it",
                                     where=str(path))
                try:
                    catalog.gpu(gpu)
                except InputError as exc:
                    raise InputError(f"{where}.{field_name}: {exc}", where=str(path)) from None
                raise InputError(f"{where}.{field_name}.{gpu}: no service may run {gpu} and the inventory has none, "
                                 "so this would change nothing; add it to a service's gpus or the inventory",
                                 where=str(path))


_PRICE_FIELDS = {"price_usd_per_hour", "price_source", "price_date"}


def _one_definition_per_gpu(services: list[Service], inventory) -> None:
    """A GPU type is one piece of hardware at one price across the fleet: a service's catalog
    override may not give it other memory, bandwidth or speed (3,746 GPUs of 'the same' type), and
    two services may not pay two on-demand prices for it (state a shared price in the inventory).
    The price of a type in the inventory is the fleet's, checked against each service's by
    _with_shared_prices: a service may state that price again."""
    first: dict[str, tuple[Service, dict, float]] = {}
    for svc in services:
        for cand in svc.inputs.scenario.gpu_candidates:
            gpu = svc.inputs.catalog.gpu(cand.id)
            hardware = gpu.model_dump(exclude=_PRICE_FIELDS)
            price = cand.price_per_hour(gpu.price_usd_per_hour)
            if cand.id not in first:
                first[cand.id] = (svc, hardware, price)
                continue
            other, other_hardware, other_price = first[cand.id]
            if hardware != other_hardware:
                changed = sorted(k for k in hardware if hardware[k] != other_hardware.get(k))
                raise InputError(f"GPU type '{cand.id}' is defined differently here and in service '{other.name}' "
                                 f"({', '.join(changed)}); one type is one piece of hardware across the fleet",
                                 where=svc.where)
            if cand.id not in inventory and abs(price - other_price) > 1e-9:
                raise InputError(f"GPU type '{cand.id}' costs {price:g} $/hour here but {other_price:g} in service "
                                 f"'{other.name}'; a type the services share has one on-demand price: set it in the "
                                 "fleet's inventory", where=svc.where)


def _service(spec: FleetSpec, catalog: Catalog, path: Path, i: int, entry, catalog_files) -> Service:
    priced = spec.forecast is not None  # the fleet's forecast reads every service's day's volume
    if isinstance(entry, str):
        file = resolve(path.parent, entry)
        if not entry.strip():
            raise InputError(f"services[{i}]: a blank path, where a scenario file is expected", where=str(path))
        if not path_is(file, "file"):
            shown = entry if entry.isprintable() else repr(entry)  # (a control character would reach the terminal)
            if path_is(file, "folder"):
                raise InputError(f"services[{i}]: {shorten(shown)} is a folder; a service is one scenario file",
                                 where=str(path))
            if os.path.exists(file):  # a device or a pipe (/dev/null), or a link to one: there, but not a file to read
                raise InputError(f"services[{i}]: {shorten(shown)} is not a regular file; a service is one scenario "
                                 "file", where=str(path))
            if os.path.islink(file):  # (False, not an error, for a name too long)
                raise InputError(f"services[{i}]: {shorten(shown)} is {missing_text(file)}", where=str(path))
            raise InputError(f"services[{i}]: no scenario file {shorten(shown)} (paths are relative to the fleet file)",
                             where=str(path))
        raw = load_yaml(file)
        if is_fleet_document(raw):
            itself = "this fleet file itself" if file.resolve() == path.resolve() else "a fleet file"
            raise InputError(f"services[{i}]: {entry} is {itself}; a service is one scenario file", where=str(path))
        scn = scenario_from_document(raw, file)
        return Service(i, scenario_inputs(scn, file, file.parent, catalog_files=catalog_files, day_priced=priced),
                       str(file))
    where = f"{path}: services[{i}]"
    scn = validate(Scenario, entry, where=str(path), prefix=f"services[{i}]")
    return Service(i, scenario_inputs(scn, path, path.parent, catalog_files=catalog_files, where=where,
                                      day_priced=priced), where)


def _with_shared_prices(fleet: FleetInputs, *, check: bool = True) -> FleetInputs:
    """Every service pays the fleet's one on-demand price for a shared GPU type; with `check`, a
    service that states another price for one is told to state it once, in the fleet's inventory."""
    services = []
    for svc in fleet.services:
        scn, catalog = svc.inputs.scenario, svc.inputs.catalog
        gpus = []
        for j, cand in enumerate(scn.gpu_candidates):
            if cand.id not in fleet.spec.inventory:
                gpus.append(cand)
                continue
            price = fleet.on_demand_price(cand.id)
            own = cand.price_per_hour(catalog.gpu(cand.id).price_usd_per_hour)
            if abs(own - price) <= 1e-9:
                gpus.append(cand)
                continue
            base = fleet.catalog.gpus.get(cand.id)  # (None: a type the service defines in its catalog overrides)
            if check and (cand.price_usd_per_hour is not None or base is None or own != base.price_usd_per_hour):
                # named where the service states it: its candidate's price, else its catalog's entry
                field = (f"gpus[{j}]" if cand.price_usd_per_hour is not None
                         else f"catalog: gpus.{cand.id}.price_usd_per_hour")
                raise InputError(
                    f"{field}: price of the shared GPU type '{cand.id}' is {own:g} $/hour here but {price:g} in the "
                    "fleet; a shared type has one on-demand price: set it in the fleet's inventory", where=svc.where)
            gpus.append(GPUCandidate(**{**cand.model_dump(), "price_usd_per_hour": price}))
        scn = scn.model_copy(update={"gpus": gpus, "solver": fleet.spec.solver})  # one solver for the whole fleet
        services.append(Service(svc.index, Inputs(svc.inputs.path, scn, catalog, svc.inputs.model, svc.inputs.traffic),
                                svc.where))
    return FleetInputs(fleet.path, fleet.spec, fleet.catalog, tuple(services), fleet.stated)
