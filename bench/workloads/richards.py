"""Richards: Martin Richards' operating-system scheduler simulation (as pyperformance's richards)."""

from __future__ import annotations

from typing import Optional

BUFSIZE = 4
I_IDLE, I_WORK, I_HANDLER_A, I_HANDLER_B, I_DEV_A, I_DEV_B = 1, 2, 3, 4, 5, 6
K_DEV, K_WORK = 1000, 1001
#: Known result of one simulation (Richards' reference counts).
EXPECTED_QPKT, EXPECTED_HOLD = 23246, 9297
#: Simulations per run.
REPEAT = 5


class Packet:
    def __init__(self, link: Optional[Packet], ident: int, kind: int) -> None:
        self.link = link
        self.ident = ident
        self.kind = kind
        self.datum = 0
        self.data = [0] * BUFSIZE

    def append_to(self, queue: Optional[Packet]) -> Packet:
        """Appends this packet at the end of `queue` and returns the queue's head."""
        self.link = None
        if queue is None:
            return self
        last = queue
        while last.link is not None:
            last = last.link
        last.link = self
        return queue


class Scheduler:
    def __init__(self) -> None:
        self.tasks: dict[int, Task] = {}
        self.task_list: Optional[Task] = None
        self.hold_count = 0
        self.qpkt_count = 0

    def run(self) -> None:
        task = self.task_list
        while task is not None:
            if task.is_held_or_waiting():
                task = task.link
            else:
                task = task.run_task()


class Task:
    """A task: a state (packet pending, waiting, held), an input queue and a priority."""

    def __init__(self, sched: Scheduler, ident: int, priority: int, queue: Optional[Packet],
                 pending: bool, waiting: bool) -> None:
        self.sched = sched
        self.link = sched.task_list
        self.ident = ident
        self.priority = priority
        self.input = queue
        self.packet_pending = pending
        self.task_waiting = waiting
        self.task_holding = False
        sched.task_list = self
        sched.tasks[ident] = self

    # -- state ---------------------------------------------------------------------------------
    def is_held_or_waiting(self) -> bool:
        return self.task_holding or (not self.packet_pending and self.task_waiting)

    def is_waiting_with_packet(self) -> bool:
        return self.packet_pending and self.task_waiting and not self.task_holding

    def set_running(self) -> None:
        self.packet_pending = self.task_waiting = self.task_holding = False

    def set_packet_pending(self) -> None:
        self.packet_pending = True
        self.task_waiting = self.task_holding = False

    # -- scheduling ----------------------------------------------------------------------------
    def run_task(self) -> Optional[Task]:
        packet = None
        if self.is_waiting_with_packet():
            packet = self.input
            assert packet is not None
            self.input = packet.link
            if self.input is None:
                self.set_running()
            else:
                self.set_packet_pending()
        return self.step(packet)

    def step(self, packet: Optional[Packet]) -> Optional[Task]:
        raise NotImplementedError

    def add_packet(self, packet: Packet, current: Task) -> Task:
        if self.input is None:
            self.input = packet
            self.packet_pending = True
            if self.priority > current.priority:
                return self
        else:
            packet.append_to(self.input)
        return current

    def wait(self) -> Task:
        self.task_waiting = True
        return self

    def hold(self) -> Optional[Task]:
        self.sched.hold_count += 1
        self.task_holding = True
        return self.link

    def release(self, ident: int) -> Task:
        task = self.sched.tasks[ident]
        task.task_holding = False
        return task if task.priority > self.priority else self

    def send(self, packet: Packet) -> Task:
        target = self.sched.tasks[packet.ident]
        self.sched.qpkt_count += 1
        packet.link = None
        packet.ident = self.ident
        return target.add_packet(packet, self)


class IdleTask(Task):
    def __init__(self, sched: Scheduler, ident: int, priority: int, count: int) -> None:
        super().__init__(sched, ident, priority, None, pending=False, waiting=False)
        self.control = 1
        self.count = count

    def step(self, packet: Optional[Packet]) -> Optional[Task]:
        self.count -= 1
        if self.count == 0:
            return self.hold()
        if self.control & 1 == 0:
            self.control //= 2
            return self.release(I_DEV_A)
        self.control = (self.control // 2) ^ 0xD008
        return self.release(I_DEV_B)


class WorkTask(Task):
    def __init__(self, sched: Scheduler, ident: int, priority: int, queue: Packet) -> None:
        super().__init__(sched, ident, priority, queue, pending=True, waiting=True)
        self.destination = I_HANDLER_A
        self.count = 0

    def step(self, packet: Optional[Packet]) -> Optional[Task]:
        if packet is None:
            return self.wait()
        self.destination = I_HANDLER_B if self.destination == I_HANDLER_A else I_HANDLER_A
        packet.ident = self.destination
        packet.datum = 0
        for i in range(BUFSIZE):
            self.count = self.count + 1 if self.count < 26 else 1
            packet.data[i] = ord("A") + self.count - 1
        return self.send(packet)


class HandlerTask(Task):
    def __init__(self, sched: Scheduler, ident: int, priority: int, queue: Packet) -> None:
        super().__init__(sched, ident, priority, queue, pending=True, waiting=True)
        self.work_in: Optional[Packet] = None
        self.device_in: Optional[Packet] = None

    def step(self, packet: Optional[Packet]) -> Optional[Task]:
        if packet is not None:
            if packet.kind == K_WORK:
                self.work_in = packet.append_to(self.work_in)
            else:
                self.device_in = packet.append_to(self.device_in)
        work = self.work_in
        if work is None:
            return self.wait()
        index = work.datum
        if index >= BUFSIZE:
            self.work_in = work.link
            return self.send(work)
        device = self.device_in
        if device is None:
            return self.wait()
        self.device_in = device.link
        device.datum = work.data[index]
        work.datum = index + 1
        return self.send(device)


class DeviceTask(Task):
    def __init__(self, sched: Scheduler, ident: int, priority: int) -> None:
        super().__init__(sched, ident, priority, None, pending=False, waiting=True)
        self.pending: Optional[Packet] = None

    def step(self, packet: Optional[Packet]) -> Optional[Task]:
        if packet is None:
            packet = self.pending
            if packet is None:
                return self.wait()
            self.pending = None
            return self.send(packet)
        self.pending = packet
        return self.hold()


def queue_of(count: int, ident: int, kind: int) -> Packet:
    head: Optional[Packet] = None
    for _ in range(count):
        head = Packet(head, ident, kind)
    assert head is not None
    return head


def simulate() -> Scheduler:
    sched = Scheduler()
    IdleTask(sched, I_IDLE, 1, 10000)
    WorkTask(sched, I_WORK, 1000, queue_of(2, 0, K_WORK))
    HandlerTask(sched, I_HANDLER_A, 2000, queue_of(3, I_DEV_A, K_DEV))
    HandlerTask(sched, I_HANDLER_B, 3000, queue_of(3, I_DEV_B, K_DEV))
    DeviceTask(sched, I_DEV_A, 4000)
    DeviceTask(sched, I_DEV_B, 5000)
    sched.run()
    return sched


def run(scale: float = 1.0) -> None:
    for _ in range(max(1, round(REPEAT * scale))):
        sched = simulate()
        if (sched.qpkt_count, sched.hold_count) != (EXPECTED_QPKT, EXPECTED_HOLD):
            raise AssertionError(f"richards: wrong counts {sched.qpkt_count}, {sched.hold_count}")
