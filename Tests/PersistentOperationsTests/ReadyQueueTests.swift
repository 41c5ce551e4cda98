import CrashHarness
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

    @Test func slotsOfTheHeapTake32BytesAndComeBackWholeInRunOrder() {
        // Given slots of every kind: canonical and other identifiers, priorities beyond 8 bits,
        // turns, and sequences that do not fit in 55 bits, each (priority, turn, sequence as
        // ordered) distinct
        #expect(PersistentOperationQueue.ReadyQueue.heapSlotStride == 32)
        var random = SeededGenerator(seed: 5)
        var slots: [ReadySlot] = []
        var orders: Set<[UInt64]> = []
        let clamp: UInt64 = (1 << 55) - 1
        while slots.count < 3_000 {
            let id = Int.random(in: 0..<5, using: &random) == 0 ? "legacy-\(slots.count)" : RecordIdentifier.make()
            let sequence = Int.random(in: 0..<10, using: &random) == 0
                ? UInt64.random(in: clamp...UInt64.max, using: &random) : UInt64.random(in: 0...clamp, using: &random)
            var slot = ReadySlot(id: id, order: RunOrder(priority: Int.random(in: -200...200, using: &random), enqueueSequence: sequence))
            slot.round = UInt64.random(in: 0..<4, using: &random) * UInt64.random(in: 0...UInt64.max / 4, using: &random)
            let order = [UInt64(bitPattern: Int64(-slot.order.priority)), slot.round, min(sequence, clamp)]
            guard orders.insert(order).inserted else { continue }
            slots.append(slot)
        }

        // When they are inserted in random order and popped
        var ready = PersistentOperationQueue.ReadyQueue()
        for slot in slots.shuffled(using: &random) { ready.insert(slot) }
        var popped: [ReadySlot] = []
        while let next = ready.popFirst() { popped.append(next) }

        // Then each comes back once, with its identifier, order and turn exactly, in run order
        func describe(_ slot: ReadySlot) -> String { "\(slot.id) \(slot.order.priority) \(slot.round) \(slot.order.enqueueSequence)" }
        let sameSlots = popped.map(describe).sorted() == slots.map(describe).sorted()
        #expect(sameSlots)
        let inOrder = zip(popped, popped.dropFirst()).allSatisfy { first, second in !ReadySlot.runsBefore(second, first) }
        #expect(inOrder)
        #expect(ready.isEmpty)
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
