import Foundation

extension PersistentOperationQueue {
    /// The due operations waiting for room in the `OperationQueue`, first to run first: a heap,
    /// and beside it the run of a restore's backlog, already sorted.
    ///
    /// A restore readies its due backlog in run order (`restore()` sorts what it restored). A
    /// heap of it would be a second copy of the restore's list, 48 bytes a record beside 40; the run
    /// takes over the list itself, and is read from the front. Each `popFirst()` takes the first
    /// of the heap and of the run; the run's storage is given back as it is read.
    ///
    /// ```swift
    /// var ready = PersistentOperationQueue.ReadyQueue()
    /// let restored = PersistentOperationQueue.RestoredRecord(
    ///     key: .uuid(UUIDBits(high: 0, low: 1)), order: RunOrder(priority: 0, enqueueSequence: 1), due: nil
    /// )
    /// ready.adoptRun([restored])   // taken over, not copied
    /// ready.insert(PersistentOperationQueue.ReadySlot(id: RecordIdentifier.make(), order: RunOrder(priority: 4, enqueueSequence: 2)))
    /// let first = ready.popFirst()   // the inserted slot: a higher priority runs first
    /// ```
    struct ReadyQueue: Sendable {
        /// The slots inserted, 32 bytes each (see ``HeapSlot``).
        private var heap = Heap<HeapSlot>(by: HeapSlot.runsBefore)
        /// The slots the heap holds only a stand-in for (see ``HeapSlot``), by its number.
        private var escaped: [UInt64: ReadySlot] = [:]
        private var nextEscape: UInt64 = 0
        /// Restored records in run order, all ready; those before `cursor` were taken.
        private var run: [RestoredRecord] = []
        private var cursor = 0

        /// The run's records left are given back in one piece once at least this many were read
        /// and they are at least half of it.
        static let runShrinkThreshold = 16_384

        var count: Int { heap.count + run.count - cursor }
        var isEmpty: Bool { count == 0 }

        mutating func insert(_ slot: ReadySlot) {
            if let packed = HeapSlot(slot) {
                heap.insert(packed)
            } else {
                escaped[nextEscape] = slot
                heap.insert(HeapSlot(standingInFor: slot, number: nextEscape))
                nextEscape &+= 1
            }
        }

        /// Takes over `restored`, sorted in run order (priority, then enqueue order) and holding
        /// only records of entries made ready, as the restore's run. A run not read whole yet
        /// is merged into the heap first (one restore per queue makes that rare).
        mutating func adoptRun(_ restored: [RestoredRecord]) {
            while cursor < run.count {
                insert(slot(of: run[cursor]))
                cursor += 1
            }
            run = restored
            cursor = 0
            if run.isEmpty { run = [] }
        }

        mutating func popFirst() -> ReadySlot? {
            guard cursor < run.count else { return popHeap() }
            let head = slot(of: run[cursor])
            if let top = heap.first, ReadySlot.runsBefore(slot(of: top), head) { return popHeap() }
            cursor += 1
            if cursor == run.count {
                run = []
                cursor = 0
            } else if cursor >= Self.runShrinkThreshold, cursor * 2 >= run.count {
                // (The copy is at most half the old one, which goes.)
                run = Array(run[cursor...])
                cursor = 0
            }
            return head
        }

        private func slot(of record: RestoredRecord) -> ReadySlot {
            ReadySlot(key: record.key, order: record.order)
        }

        private mutating func popHeap() -> ReadySlot? {
            guard let first = heap.popFirst() else { return nil }
            guard first.isStandIn else { return first.slot }
            return escaped.removeValue(forKey: first.low)
        }

        private func slot(of packed: HeapSlot) -> ReadySlot {
            packed.isStandIn ? escaped[packed.low]! : packed.slot
        }

        /// The size of a slot in the heap (for tests).
        static var heapSlotStride: Int { MemoryLayout<HeapSlot>.stride }

        /// A ``ReadySlot`` as the heap keeps it: 32 bytes instead of 40 (a million due,
        /// added in this process, take 8 MB less). The identifier is held as its UUID (a
        /// ``RecordKey`` takes 17 bytes, its case included, and its padding 7 more), the
        /// priority and the enqueue sequence share 64 bits. A slot whose identifier is not in
        /// canonical form, or whose sequence does not fit in 55 bits (never, but for a record
        /// crafted so), is kept in `escaped` whole: its stand-in here holds its number there,
        /// and its order (its sequence clamped: among such slots, order is by priority and
        /// turn only).
        fileprivate struct HeapSlot: Sendable {
            private static let sequenceBits: UInt64 = 55
            private static let sequenceMask: UInt64 = (1 << sequenceBits) - 1
            private static let standInBit: UInt64 = 1 << 63

            private let high: UInt64
            /// The UUID's low half, or the number of a stand-in's slot.
            let low: UInt64
            private let round: UInt64
            /// Bit 63: a stand-in; bits 55–62: 127 minus the priority (smaller runs first);
            /// bits 0–54: the enqueue sequence.
            private let tail: UInt64

            /// `slot` packed, or `nil` when it needs a stand-in.
            init?(_ slot: ReadySlot) {
                guard case .uuid(let uuid) = slot.key, slot.order.enqueueSequence <= Self.sequenceMask else { return nil }
                high = uuid.high
                low = uuid.low
                round = slot.round
                tail = Self.tail(priority: slot.order.priority, sequence: slot.order.enqueueSequence)
            }

            /// The stand-in of `slot`, kept in `escaped` under `number`.
            init(standingInFor slot: ReadySlot, number: UInt64) {
                high = 0
                low = number
                round = slot.round
                tail = Self.standInBit | Self.tail(priority: slot.order.priority, sequence: min(slot.order.enqueueSequence, Self.sequenceMask))
            }

            private static func tail(priority: Int, sequence: UInt64) -> UInt64 {
                // (A slot's priority is held in 8 bits already: -128 to 127.)
                UInt64(127 - Int(Int8(clamping: priority))) << sequenceBits | sequence
            }

            var isStandIn: Bool { tail & Self.standInBit != 0 }

            /// The slot again (not for a stand-in).
            var slot: ReadySlot {
                let priority = 127 - Int((tail >> Self.sequenceBits) & 0xFF)
                var slot = ReadySlot(
                    key: .uuid(UUIDBits(high: high, low: low)), order: RunOrder(priority: priority, enqueueSequence: tail & Self.sequenceMask)
                )
                slot.round = round
                return slot
            }

            /// As ``ReadySlot/runsBefore(_:_:)``: priority first, then the turn, then the
            /// enqueue order.
            static func runsBefore(_ lhs: HeapSlot, _ rhs: HeapSlot) -> Bool {
                let lhsPriority = (lhs.tail >> sequenceBits) & 0xFF, rhsPriority = (rhs.tail >> sequenceBits) & 0xFF
                if lhsPriority != rhsPriority { return lhsPriority < rhsPriority }
                if lhs.round != rhs.round { return lhs.round < rhs.round }
                return lhs.tail & sequenceMask < rhs.tail & sequenceMask
            }
        }
    }
}
