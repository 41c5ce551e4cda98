import Foundation

/// The payload of one chat message of the lane soak (`crash-demo lanes-soak`): which lane it
/// goes out in, its place there, and what its attempts do.
package struct LaneMessage: Codable, Sendable, Hashable {
    /// What a message does, attempt by attempt.
    package enum Behaviour: String, Codable, Sendable, CaseIterable {
        /// Succeeds on its first attempt.
        case succeeds
        /// Fails twice with a retriable error (counted retries after a short delay), then succeeds.
        case retriesTwice
        /// Is refused: fails for good (not retriable) on its first attempt.
        case fails
        /// Fails for good on a first attempt that is not a retry, and succeeds once re-queued
        /// (the messages of a lane that holds on a failure).
        case failsOnceThenSucceeds
        /// Would succeed, but the app cancels it right after adding it, usually while it
        /// waits for its turn.
        case cancelledWhileWaiting
        /// Runs until the app cancels it, a few milliseconds after each attempt starts.
        case cancelledWhileRunning
    }

    /// The message's number, unique in the soak; messages are added in this order.
    package var index: Int
    /// The lane's number (its name is ``LanePlan/name(ofLane:)``).
    package var lane: Int
    package var behaviour: Behaviour
    /// Milliseconds one attempt takes.
    package var attemptMilliseconds: Int

    package init(index: Int, lane: Int, behaviour: Behaviour, attemptMilliseconds: Int) {
        self.index = index
        self.lane = lane
        self.behaviour = behaviour
        self.attemptMilliseconds = attemptMilliseconds
    }
}

/// How the lane soak spreads its messages over lanes and what each one does, so that the app
/// that adds them and the verifier that checks them agree.
///
/// Message `i` goes out in lane `i % lanes`, at position `i / lanes`. Lane 0 holds on a
/// failure (`EnqueueOptions.holdsLaneOnFailure`): its failures are re-queued or purged by
/// the app, and none of its messages expires; in the other lanes a failure is for good, and
/// two messages in ten expire shortly after they are added.
package struct LanePlan: Sendable, Hashable {
    /// The default number of lanes: 4 conversations.
    package static let defaultLanes = 4

    /// How many lanes the messages are spread over.
    package let lanes: Int

    package init(lanes: Int = defaultLanes) {
        precondition(lanes >= 1, "a lane plan needs at least one lane")
        self.lanes = lanes
    }

    package func lane(of index: Int) -> Int { index % lanes }

    /// The message's place in its lane, from 0.
    package func position(of index: Int) -> Int { index / lanes }

    /// The lane's name, as passed to ``EnqueueOptions/lane``.
    package func name(ofLane lane: Int) -> String { "chat:\(lane)" }

    /// Whether a failure for good holds the lane until the app re-queues or purges it.
    package func holdsOnFailure(_ lane: Int) -> Bool { lane == 0 }

    /// The messages of the same lane added before message `index`, in add order.
    package func earlierMessages(than index: Int) -> StrideTo<Int> {
        stride(from: lane(of: index), to: index, by: lanes)
    }

    /// A ten-message pattern, shifted by three places from one lane to the next.
    private func slot(of index: Int) -> Int { (position(of: index) + 3 * lane(of: index)) % 10 }

    package func behaviour(of index: Int) -> LaneMessage.Behaviour {
        switch slot(of: index) {
        case 1, 6, 9: return .retriesTwice
        case 3: return holdsOnFailure(lane(of: index)) ? .failsOnceThenSucceeds : .fails
        case 5: return .cancelledWhileWaiting
        case 8: return .cancelledWhileRunning
        default: return .succeeds
        }
    }

    /// Whether the message is added with an expiration date a moment away.
    package func expires(_ index: Int) -> Bool { expiryScale(of: index) != nil }

    /// For a message added with an expiration date, how many times the soak's expiry delay
    /// after its add it expires: 1 for one that succeeds at once (it usually expires while it
    /// waits for its turn), 3 for one that retries (it may expire while it waits to retry).
    package func expiryScale(of index: Int) -> Double? {
        guard !holdsOnFailure(lane(of: index)) else { return nil }
        switch slot(of: index) {
        case 2: return 1
        case 6: return 3
        default: return nil
        }
    }

    /// Whether the app re-queues the message when its failure holds the lane (it runs again,
    /// first, and succeeds); otherwise it purges it and the lane moves on.
    package func requeuesOnHold(_ index: Int) -> Bool { position(of: index) / 10 % 2 == 0 }

    /// Message `index` as the app adds it.
    package func message(_ index: Int, attemptMilliseconds: Int) -> LaneMessage {
        LaneMessage(index: index, lane: lane(of: index), behaviour: behaviour(of: index), attemptMilliseconds: attemptMilliseconds)
    }
}
