import Foundation
import Testing
@testable import RetryingOperation

/// The package's lock box: a value and a platform lock in one allocation.
@Suite(.timeLimit(.minutes(1)))
struct LockedTests {
    /// Two counters that every change moves together, so a change made without the lock
    /// held shows as a torn pair.
    struct Pair: Sendable {
        var first = 0
        var second = 0
    }

    @Test func concurrentChangesAreNeitherLostNorTorn() async {
        // Given a pair behind a lock, and 8 threads that each change it 20,000 times and
        // read it back
        let pair = Locked(Pair())
        let threads = 8
        let changesPerThread = 20_000
        let tornReads = await onDedicatedThread {
            let torn = Locked(0)
            DispatchQueue.concurrentPerform(iterations: threads) { _ in
                for _ in 0..<changesPerThread {
                    let isTorn = pair.withLock { value -> Bool in
                        value.first += 1
                        value.second += 1
                        return value.first != value.second
                    }
                    if isTorn { torn.withLock { $0 += 1 } }
                }
            }
            return torn.withLock { $0 }
        }

        // Then every change counted and no reader saw a half-made change
        #expect(tornReads == 0)
        #expect(pair.withLock { $0.first } == threads * changesPerThread)
        #expect(pair.withLock { $0.second } == threads * changesPerThread)
    }

    @Test func copiesShareOneValue() {
        // Given a lock box and a copy of it
        let original = Locked([1])
        let copy = original
        // When the copy changes the value
        copy.withLock { $0.append(2) }
        // Then the original sees the change
        #expect(original.withLock { $0 } == [1, 2])
    }

    @Test func bodyErrorsPropagateAndReleaseTheLock() {
        // Given a lock box whose body throws after changing the value
        let box = Locked(0)
        #expect(throws: TestError("inside")) {
            try box.withLock { value in
                value = 1
                throw TestError("inside")
            }
        }
        // Then the change stays and the lock was released (this would deadlock otherwise)
        #expect(box.withLock { $0 } == 1)
    }

    @Test func releasingTheLastCopyReleasesTheValue() {
        // Given a value holding the only strong reference to an object
        final class Token: Sendable {}
        weak var weakToken: Token?
        do {
            let token = Token()
            weakToken = token
            let box = Locked<Token?>(token)
            box.withLock { #expect($0 === token) }
        }
        // Then once the lock box is gone, so is the object
        #expect(weakToken == nil)
    }
}
