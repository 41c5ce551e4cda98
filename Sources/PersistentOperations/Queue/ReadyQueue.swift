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
        private var heap = Heap<ReadySlot>(by: ReadySlot.runsBefore)
        /// Restored records in run order, all ready; those before `cursor` were taken.
        private var run: [RestoredRecord] = []
        private var cursor = 0

        /// The run's records left are given back in one piece once at least this many were read
        /// and they are at least half of it.
        static let runShrinkThreshold = 16_384

        var count: Int { heap.count + run.count - cursor }
        var isEmpty: Bool { count == 0 }

        mutating func insert(_ slot: ReadySlot) {
            heap.insert(slot)
        }

        /// Takes over `restored`, sorted in run order (priority, then enqueue order) and holding
        /// only records of entries made ready, as the restore's run. A run not read whole yet
        /// is merged into the heap first (one restore per queue makes that rare).
        mutating func adoptRun(_ restored: [RestoredRecord]) {
            while cursor < run.count {
                heap.insert(slot(of: run[cursor]))
                cursor += 1
            }
            run = restored
            cursor = 0
            if run.isEmpty { run = [] }
        }

        mutating func popFirst() -> ReadySlot? {
            guard cursor < run.count else { return heap.popFirst() }
            let head = slot(of: run[cursor])
            if let top = heap.first, ReadySlot.runsBefore(top, head) { return heap.popFirst() }
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
    }
}
