import Foundation
import Testing
@testable import PersistentOperations

@Suite("Ready queue: a heap beside a restore's sorted run")
struct ReadyQueueTests {
    typealias ReadySlot = PersistentOperationQueue.ReadySlot

    static func restored(_ orders: [(priority: Int, sequence: UInt64)]) -> [PersistentOperationQueue.RestoredRecord] {
        orders.map {
            PersistentOperationQueue.RestoredRecord(id: RecordIdentifier.make(), order: RunOrder(priority: $0.priority, enqueueSequence: $0.sequence), due: nil, prerequisites: [])
        }
    }

    static func drain(_ ready: inout PersistentOperationQueue.ReadyQueue) -> [UInt64] {
        var sequences: [UInt64] = []
        while let next = ready.popFirst() { sequences.append(next.order.enqueueSequence) }
        return sequences
    }

    @Test func popsTheFirstOfTheHeapAndTheRunInRunOrder() {
        // Given a run of normal-priority records 10, 20, …, 100 and, in the heap, others
        // before, between and after them, of several priorities
        var ready = PersistentOperationQueue.ReadyQueue()
        ready.adoptRun(Self.restored((1...10).map { (0, UInt64($0 * 10)) }))
        for (priority, sequence) in [(4, 200), (0, 5), (0, 35), (0, 36), (-4, 1), (0, 1000), (8, 300)] {
            ready.insert(ReadySlot(id: RecordIdentifier.make(), order: RunOrder(priority: priority, enqueueSequence: UInt64(sequence))))
        }
        #expect(ready.count == 17)

        // Then they come out by priority, then enqueue order, whichever holds them
        #expect(Self.drain(&ready) == [300, 200, 5, 10, 20, 30, 35, 36, 40, 50, 60, 70, 80, 90, 100, 1000, 1])
        #expect(ready.isEmpty && ready.popFirst() == nil)
    }

    @Test func aSlotTakes40BytesAndKeepsItsOrderAPriorityBeyond8BitsHeldAsTheNearestThatFits() {
        #expect(MemoryLayout<ReadySlot>.stride == 40)
        let order = RunOrder(priority: -8, enqueueSequence: UInt64.max - 1)
        #expect(ReadySlot(id: RecordIdentifier.make(), order: order).order == order)
        let high = ReadySlot(id: RecordIdentifier.make(), order: RunOrder(priority: 1_000, enqueueSequence: 2))
        let low = ReadySlot(id: RecordIdentifier.make(), order: RunOrder(priority: -1_000, enqueueSequence: 1))
        #expect(high.order.priority == 127 && low.order.priority == -128)
        #expect(ReadySlot.runsBefore(high, low) && !ReadySlot.runsBefore(low, high))
    }

    @Test func aLongRunIsGivenBackAsItIsReadAndASecondRunMergesWithTheRestOfTheFirst() {
        // Given a run longer than the threshold at which its storage is given back
        let length = PersistentOperationQueue.ReadyQueue.runShrinkThreshold * 3
        var ready = PersistentOperationQueue.ReadyQueue()
        ready.adoptRun(Self.restored((0..<length).map { (0, UInt64($0 * 2)) }))

        // When most of it is read, then a second run of the odd sequences is adopted
        let firstPart = length * 2 / 3 + 5
        var sequences: [UInt64] = []
        for _ in 0..<firstPart { sequences.append(ready.popFirst()!.order.enqueueSequence) }
        #expect(ready.count == length - firstPart)
        ready.adoptRun(Self.restored((0..<100).map { (0, UInt64(2 * (firstPart + $0) + 1)) }))

        // Then every record comes out once, in order
        sequences += Self.drain(&ready)
        let expected = (0..<firstPart).map { UInt64($0 * 2) } + ((firstPart * 2)..<(length * 2)).map(UInt64.init).filter { $0.isMultiple(of: 2) || $0 < UInt64(2 * (firstPart + 100)) }
        #expect(sequences == expected)
    }
}
